//! The route table: every path the gateway serves and what it is.
//!
//! `main.rs` mounts the routes from this table, and `discovery.rs` renders
//! the same table as `GET /.well-known/x402`, `GET /openapi.json` and the
//! `bazaar` extension of every 402, so a route cannot be served without its
//! description, and no description is kept by hand: the request schemas sit
//! beside the validators (`request.rs`, `images/`), the answer examples are
//! rendered by the handlers' own functions.

use http::Method;
use serde_json::{Value, json};

use crate::catalogue::{Catalogue, Model};
use crate::request::{ChatRequest, Endpoint};
use crate::upstream::EchoUpstream;

/// What a route does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `GET /healthz`: liveness.
    Health,
    /// `GET /readyz`: readiness (the facilitator answered, not draining).
    Ready,
    /// `GET /v1/models`: the catalogue.
    Models,
    /// A paid (or free-tier) inference endpoint.
    Inference(Endpoint),
    /// `POST /v1/images/generations`: a paid image job.
    ImageJob,
    /// `GET /v1/images/generations/{id}`: a paid job's state, by the payment
    /// that bought it (paid replay, uncharged).
    ImagePoll,
    /// `GET /.well-known/x402`: the x402 discovery document.
    WellKnownX402,
    /// `GET /openapi.json`: the OpenAPI 3.1 document.
    OpenApi,
}

/// One method on one path.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub(crate) method: Method,
    /// The path, in axum's and OpenAPI's shared `{name}` syntax.
    pub(crate) path: &'static str,
    pub(crate) kind: Kind,
    /// The operation id and one-line summary.
    pub(crate) id: &'static str,
    pub(crate) summary: &'static str,
    /// Also served under `/api` (the clients' `api_url` prefix).
    pub(crate) api_alias: bool,
}

const fn route(
    method: Method,
    path: &'static str,
    kind: Kind,
    id: &'static str,
    summary: &'static str,
    api_alias: bool,
) -> Route {
    Route {
        method,
        path,
        kind,
        id,
        summary,
        api_alias,
    }
}

/// Every route of the gateway.
pub(crate) const ROUTES: &[Route] = &[
    route(
        Method::GET,
        "/healthz",
        Kind::Health,
        "health",
        "Liveness probe",
        false,
    ),
    route(
        Method::GET,
        "/readyz",
        Kind::Ready,
        "ready",
        "Readiness probe",
        false,
    ),
    route(
        Method::GET,
        "/.well-known/x402",
        Kind::WellKnownX402,
        "x402Discovery",
        "x402 discovery: services, models, prices and how to pay",
        false,
    ),
    route(
        Method::GET,
        "/openapi.json",
        Kind::OpenApi,
        "openApi",
        "This OpenAPI 3.1 document",
        false,
    ),
    route(
        Method::GET,
        "/v1/models",
        Kind::Models,
        "listModels",
        "The model catalogue with prices",
        true,
    ),
    route(
        Method::POST,
        "/v1/chat/completions",
        Kind::Inference(Endpoint::Chat),
        "chatCompletions",
        "OpenAI chat completions, paid per request in USDC (x402)",
        true,
    ),
    route(
        Method::POST,
        "/v1/messages",
        Kind::Inference(Endpoint::Messages),
        "messages",
        "Anthropic messages, paid per request in USDC (x402)",
        true,
    ),
    route(
        Method::POST,
        "/v1/responses",
        Kind::Inference(Endpoint::Responses),
        "responses",
        "OpenAI responses, paid per request in USDC (x402)",
        true,
    ),
    route(
        Method::POST,
        "/v1/images/generations",
        Kind::ImageJob,
        "createImage",
        "Image generation job, paid per image in USDC (x402)",
        true,
    ),
    route(
        Method::GET,
        "/v1/images/generations/{id}",
        Kind::ImagePoll,
        "pollImage",
        "An image job's state, with the payment that bought it (uncharged)",
        true,
    ),
];

impl Route {
    /// The paths it is served at: its own, and under `/api` if aliased.
    pub(crate) fn paths(&self) -> Vec<String> {
        let mut paths = vec![self.path.to_owned()];
        if self.api_alias {
            paths.push(format!("/api{}", self.path));
        }
        paths
    }

    /// Whether a request may be answered 402.
    pub(crate) fn is_paid(&self) -> bool {
        matches!(
            self.kind,
            Kind::Inference(_) | Kind::ImageJob | Kind::ImagePoll
        )
    }

    /// The models a request may name; empty for a route that names none.
    pub(crate) fn models<'a>(&self, catalogue: &'a Catalogue) -> Vec<&'a Model> {
        let image = match self.kind {
            Kind::Inference(_) => false,
            Kind::ImageJob | Kind::ImagePoll => true,
            _ => return Vec::new(),
        };
        catalogue
            .models()
            .iter()
            .map(|model| &**model)
            .filter(|model| model.is_image() == image)
            .collect()
    }

    /// The JSON Schema of its request body, if it takes one.
    pub(crate) fn body_schema(&self, catalogue: &Catalogue) -> Option<Value> {
        let ids: Vec<&str> = self
            .models(catalogue)
            .iter()
            .map(|model| model.id)
            .collect();
        match self.kind {
            Kind::Inference(endpoint) => Some(endpoint.body_schema(&ids)),
            Kind::ImageJob => Some(crate::images::body_schema(&ids)),
            _ => None,
        }
    }

    /// A body naming `model` that the route accepts, if it takes one.
    pub(crate) fn example_body(&self, model: &Model) -> Option<Value> {
        match self.kind {
            Kind::Inference(endpoint) => Some(endpoint.example_body(model.id)),
            Kind::ImageJob => Some(crate::images::example_body(model.id)),
            _ => None,
        }
    }

    /// The success answer to the example request for `model`, as the
    /// handlers render it (the embedded echo family answers), and its status.
    pub(crate) fn example_answer(&self, model: &Model) -> Option<(u16, Value)> {
        match self.kind {
            Kind::Inference(endpoint) => {
                let request =
                    ChatRequest::from_json(endpoint, endpoint.example_body(model.id)).ok()?;
                let completion = EchoUpstream::answer(model, &request).ok()?;
                let head = crate::render::AnswerHead {
                    id: format!(
                        "{}0000000000000000000001",
                        crate::inference::id_prefix(endpoint)
                    ),
                    created: model.created,
                    model: model.id.to_owned(),
                    prompt_tokens: request.estimated_prompt_tokens(),
                };
                Some((200, crate::render::answer(endpoint, &head, &completion)))
            }
            Kind::ImageJob | Kind::ImagePoll => {
                let id = "img_0000000000000001";
                let poll_url = format!("/v1/images/generations/{id}");
                let job = crate::images::running_job(id, 0, model.id, &poll_url);
                Some((202, job))
            }
            _ => None,
        }
    }
}

/// The route serving the request path `path` (with or without the `/api`
/// prefix); a `{name}` segment of the template matches any one segment.
pub(crate) fn serving(path: &str) -> Option<&'static Route> {
    let matches = |template: &str, path: &str| {
        let (mut template, mut path) = (template.split('/'), path.split('/'));
        loop {
            match (template.next(), path.next()) {
                (None, None) => return true,
                (Some(want), Some(got))
                    if want == got || (want.starts_with('{') && !got.is_empty()) => {}
                _ => return false,
            }
        }
    };
    ROUTES.iter().find(|route| {
        matches(route.path, path)
            || (route.api_alias
                && path
                    .strip_prefix("/api")
                    .is_some_and(|rest| matches(route.path, rest)))
    })
}

/// The MCP tools of `/mcp` (their `tools/list` entries), generated from
/// this table and the catalogue: the free listing, then each paid route's
/// tool, its input schema the route's body schema.
pub(crate) fn mcp_tools(catalogue: &Catalogue) -> Vec<Value> {
    let mut tools = vec![json!({
        "name": "list_models",
        "description": "The model catalogue with prices (free)",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": true},
    })];
    for route in ROUTES {
        let name = match route.kind {
            Kind::Inference(Endpoint::Chat) => "chat",
            Kind::ImageJob => "generate_image",
            _ => continue,
        };
        let Some(schema) = route.body_schema(catalogue) else {
            continue;
        };
        // No outputSchema: see the module docs.
        tools.push(json!({"name": name, "description": route.summary, "inputSchema": schema}));
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_path_finds_its_route_with_or_without_the_api_prefix() {
        let id = |path| serving(path).map(|route| route.id);
        assert_eq!(id("/v1/chat/completions"), Some("chatCompletions"));
        assert_eq!(id("/api/v1/messages"), Some("messages"));
        assert_eq!(id("/api/v1/images/generations/img_7"), Some("pollImage"));
        assert_eq!(id("/v1/images/generations"), Some("createImage"));
        assert_eq!(id("/v1/images/generations/"), None);
        assert_eq!(id("/v1/images/generations/a/b"), None);
        // Not aliased under /api.
        assert_eq!(id("/api/healthz"), None);
        assert_eq!(id("/healthz"), Some("health"));
    }

    #[test]
    fn every_route_is_listed_once() {
        for route in ROUTES {
            let same = ROUTES
                .iter()
                .filter(|other| other.path == route.path && other.method == route.method)
                .count();
            assert_eq!(same, 1, "{} {}", route.method, route.path);
            assert_eq!(
                ROUTES.iter().filter(|other| other.id == route.id).count(),
                1
            );
        }
    }
}
