//! What an agent reads to find and pay the gateway, all rendered from the
//! route table (`routes.rs`), the catalogue and the quote configuration at
//! start: `GET /.well-known/x402` (BlockRun's shape), `GET /openapi.json`
//! (OpenAPI 3.1, each paid operation's prices in `x-payment-info`) and the
//! `bazaar` extension of every 402 ([`Bazaar`], on unless `GATEWAY_BAZAAR=off`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use serde_json::{Map, Value, json};
use walletgate::gateway::RequestModel;
use walletgate::x402::server::mcp::tool_resource_url;
use walletgate::x402::server::{
    BazaarRoute, PaymentOption, Price, QuoteExtensionMap, QuoteExtensions,
};
use walletgate::x402::wire::UsdAmount;

use crate::catalogue::{Catalogue, Model, Pricing};
use crate::extensions::ImageRequest;
use crate::openapi_common::{
    document, json_request_body, json_response, openapi_schema, path_parameter, schema_ref,
};
use crate::routes::{Kind, ROUTES, Route, mcp_tools, serving};

/// The `bazaar` extension of every paid route and model, built once.
///
/// A 402 declares its route's entry for the requested model (the body
/// example names it); the image poll, which names no model in its request,
/// declares its route's entry for the job's kind of model.
#[derive(Debug, Default)]
pub(crate) struct Bazaar {
    /// By route path (without `/api`) and model id.
    entries: HashMap<(&'static str, &'static str), QuoteExtensionMap>,
    /// By route path: the entry of a request whose model is not known.
    fallbacks: HashMap<&'static str, QuoteExtensionMap>,
}

impl Bazaar {
    /// Every paid route's entry for every model it serves.
    pub(crate) fn new(catalogue: &Catalogue) -> Self {
        let mut bazaar = Self::default();
        for route in ROUTES.iter().filter(|route| route.is_paid()) {
            for model in route.models(catalogue) {
                let entry: QuoteExtensionMap = Arc::new(bazaar_route(route, model, catalogue));
                bazaar
                    .fallbacks
                    .entry(route.path)
                    .or_insert_with(|| entry.clone());
                bazaar.entries.insert((route.path, model.id), entry);
            }
        }
        bazaar
    }

    /// The entry of the request whose head is `request`.
    fn entry(&self, request: &Parts) -> Option<QuoteExtensionMap> {
        let route = serving(request.uri.path())?;
        let model = (request.extensions.get::<RequestModel>())
            .map(RequestModel::as_str)
            .or_else(|| {
                let image = request.extensions.get::<ImageRequest>()?;
                Some(image.model.id)
            });
        model
            .and_then(|model| self.entries.get(&(route.path, model)))
            .or_else(|| self.fallbacks.get(route.path))
            .cloned()
    }
}

/// The payment layers' hook: a 402 declares its request's entry, whatever
/// its price.
impl QuoteExtensions for Bazaar {
    fn extensions(&self, request: &Parts, _: &Price) -> Option<QuoteExtensionMap> {
        self.entry(request)
    }
}

/// `route`'s `bazaar` for `model`: the actual method, the body example and
/// schema, the answer's example.
fn bazaar_route(route: &Route, model: &Model, catalogue: &Catalogue) -> Map<String, Value> {
    let mut bazaar = BazaarRoute::new(route.method.clone());
    if let (Some(example), Some(schema)) = (route.example_body(model), route.body_schema(catalogue))
    {
        bazaar = bazaar.with_json_body(example, schema);
    }
    if route.kind == Kind::ImagePoll {
        let mut params = Map::new();
        params.insert("id".into(), json!("img_0000000000000001"));
        bazaar = bazaar.with_path_params(params, route.path.replace("{id}", ":id"));
    }
    if let Some((_, answer)) = route.example_answer(model) {
        let schema = schema_of(&answer);
        bazaar = bazaar.with_json_output(answer, Some(schema));
    }
    bazaar.to_extensions()
}

/// What the documents say about payment: the offers and the layer's flat fee.
pub(crate) struct Quoting<'a> {
    pub(crate) options: &'a [PaymentOption],
    pub(crate) flat_fee: UsdAmount,
    /// Who signs offers and receipts (`GATEWAY_OFFER_KEY_FILE`), if anyone.
    pub(crate) offer_signer: Option<alloy_primitives::Address>,
}

impl Quoting<'_> {
    /// The first offer at `total` (what clients sign).
    fn offer(&self, total: UsdAmount) -> Option<walletgate::x402::wire::PaymentRequirements> {
        self.options.first()?.requirements(total)
    }

    fn currency(&self) -> &str {
        self.options.first().map_or("USDC", PaymentOption::currency)
    }

    /// `{amount, currency}` of the example request for `model` on `route`,
    /// flat fee included where the price excludes it; `None` for a free model.
    fn example_price(&self, route: &Route, model: &Model) -> Option<Value> {
        let price = match model.pricing {
            Pricing::Free => return None,
            Pricing::PerImage { .. } => model.image_price(1)?,
            _ => {
                let Kind::Inference(endpoint) = route.kind else {
                    return None;
                };
                let body = endpoint.example_body(model.id);
                let request = crate::request::ChatRequest::from_json(endpoint, body).ok()?;
                model.price(&request)
            }
        };
        let total = price.total(self.flat_fee)?;
        Some(json!({"amount": total.to_string(), "currency": self.currency()}))
    }
}

/// A price in USD as a decimal string (`"0.25"`).
fn usd(micros: u64) -> String {
    UsdAmount::from_micros(u128::from(micros)).to_string()
}

/// The `pricing` entry of `model` in `/.well-known/x402`: its rates, and the
/// flat fee where it comes on top.
fn model_pricing(model: &Model, flat_fee: UsdAmount) -> Value {
    let fee = flat_fee.to_string();
    match model.pricing {
        Pricing::PerToken {
            input_micros_per_million,
            output_micros_per_million,
        } => json!({
            "inputPerMillionTokens": usd(input_micros_per_million),
            "outputPerMillionTokens": usd(output_micros_per_million),
            "flatFeePerRequest": fee,
        }),
        Pricing::Flat { micros } => json!({ "perRequest": usd(micros) }),
        Pricing::PerImage { micros } => json!({
            "perImage": usd(micros),
            "flatFeePerRequest": fee,
        }),
        Pricing::Free => json!({ "free": true }),
    }
}

/// One model as the browser page (`console.rs`) lists it.
pub(crate) struct ListedModel {
    pub(crate) id: &'static str,
    pub(crate) name: &'static str,
    /// The route a person tries it on (chat completions, or image jobs).
    pub(crate) endpoint: &'static str,
    /// Whether the page's "try it" form can send it a chat.
    pub(crate) chat: bool,
    /// `{amount, currency}` of that route's example request as the 402
    /// quotes it (flat fee included), as `x-payment-info` lists it; `None`
    /// for a free model.
    pub(crate) quoted: Option<Value>,
    /// Its rates, as `/.well-known/x402` lists them.
    pub(crate) rates: Value,
}

/// Every model of the catalogue (`/v1/models`) priced from the same route
/// table and quoting as the documents.
pub(crate) fn price_list(catalogue: &Catalogue, quoting: &Quoting) -> Vec<ListedModel> {
    let chat = ROUTES
        .iter()
        .find(|route| route.kind == Kind::Inference(crate::request::Endpoint::Chat));
    let images = ROUTES.iter().find(|route| route.kind == Kind::ImageJob);
    (catalogue.models().iter())
        .filter_map(|model| {
            let route = if model.is_image() { images } else { chat }?;
            Some(ListedModel {
                id: model.id,
                name: model.name,
                endpoint: route.path,
                chat: route.kind != Kind::ImageJob,
                quoted: quoting.example_price(route, model),
                rates: model_pricing(model, quoting.flat_fee),
            })
        })
        .collect()
}

/// `GET /.well-known/x402`: BlockRun's discovery document for the gateway at
/// `origin`.
pub(crate) fn well_known_x402(catalogue: &Catalogue, quoting: &Quoting, origin: &str) -> Value {
    let services: Vec<Value> = ROUTES
        .iter()
        .filter(|route| matches!(route.kind, Kind::Inference(_) | Kind::ImageJob))
        .map(|route| {
            let models = route.models(catalogue);
            let pricing: Map<String, Value> = models
                .iter()
                .map(|model| (model.id.to_owned(), model_pricing(model, quoting.flat_fee)))
                .collect();
            json!({
                "name": route.id,
                "endpoint": route.path,
                "method": route.method.as_str(),
                "description": route.summary,
                "models": models.iter().map(|model| json!({
                    "id": model.id,
                    "name": model.name,
                    "provider": model.provider(),
                    "contextWindow": model.context_window,
                    "maxOutput": model.max_output,
                    "categories": model.categories,
                })).collect::<Vec<_>>(),
                "pricing": pricing,
            })
        })
        .collect();
    let payment = quoting.offer(quoting.flat_fee).map(|offer| {
        let mut payment = json!({
            "network": offer.network.as_str(),
            "token": quoting.currency(),
            "tokenAddress": offer.asset,
            "recipient": offer.pay_to,
            "scheme": offer.scheme,
            "maxTimeoutSeconds": offer.max_timeout_seconds,
            "flatFeePerRequest": quoting.flat_fee.to_string(),
        });
        if let Some(chain_id) = offer.network.eip155_chain_id() {
            payment["chainId"] = json!(chain_id);
        }
        if let Some(signer) = quoting.offer_signer {
            // What a payer checks signed offers and receipts against.
            payment["offerSigner"] = json!(signer.to_checksum(None));
        }
        payment
    });
    json!({
        "x402Version": 2,
        "name": "walletgate gateway",
        "description": "Paid model inference and image generation: chat, messages and responses APIs, paid per request in USDC with x402; free models limited per client IP.",
        "version": env!("CARGO_PKG_VERSION"),
        "resource": {
            "url": origin,
            "description": "Model gateway",
            "mimeType": "application/json",
        },
        "services": services,
        "payment": payment,
        "authentication": {
            "type": "x402-wallet",
            "description": "No account: each paid request carries a PAYMENT-SIGNATURE for the 402's first offer.",
            "walletBased": true,
        },
        "openapi": format!("{origin}/openapi.json"),
        "mcp": mcp_service(catalogue),
    })
}

/// The `/mcp` endpoint and its tools, from the same table as `tools/list`;
/// each paid tool's PaymentRequired names `resource.url` `mcp://tool/<name>`.
fn mcp_service(catalogue: &Catalogue) -> Value {
    let tools: Vec<Value> = (mcp_tools(catalogue).iter())
        .filter_map(|tool| {
            let name = tool["name"].as_str()?;
            Some(json!({
                "name": name,
                "description": tool["description"],
                "resource": tool_resource_url(name),
                "paid": name != "list_models",
            }))
        })
        .collect();
    json!({"endpoint": "/mcp", "transport": "streamable-http", "tools": tools})
}

/// `GET /openapi.json`: every route of the table, request and answer
/// schemas, each paid operation's prices (`x-payment-info`) and its 402.
pub(crate) fn openapi(catalogue: &Catalogue, quoting: &Quoting, origin: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert("OpenApi".into(), openapi_schema());
    schemas.insert("PaymentRequired".into(), payment_required_schema());
    for route in ROUTES {
        let operation = operation(route, catalogue, quoting, &mut schemas);
        for path in route.paths() {
            let item = paths.entry(path).or_insert_with(|| json!({}));
            item[route.method.as_str().to_ascii_lowercase()] = operation.clone();
        }
    }
    let info = json!({
        "title": "walletgate gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "The Area B reference server: OpenAI- and Anthropic-style inference and image jobs, paid per request with x402 (a 402 quote, then the same request with PAYMENT-SIGNATURE). Every paid operation lists its prices per model in `x-payment-info`; each path is also served under `/api`.",
        "license": { "name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0" }
    });
    let tags = json!([
        { "name": "discovery", "description": "Public documents and probes" },
        { "name": "inference", "description": "Paid and free-tier model inference" },
        { "name": "images", "description": "Paid image jobs" }
    ]);
    let components = json!({ "schemas": schemas });
    document(info, origin, tags, paths, components)
}

fn operation(
    route: &Route,
    catalogue: &Catalogue,
    quoting: &Quoting,
    schemas: &mut Map<String, Value>,
) -> Value {
    let tag = match route.kind {
        Kind::Inference(_) => "inference",
        Kind::ImageJob | Kind::ImagePoll => "images",
        _ => "discovery",
    };
    let mut operation = Map::new();
    operation.insert("operationId".into(), json!(route.id));
    operation.insert("tags".into(), json!([tag]));
    operation.insert("summary".into(), json!(route.summary));
    let mut responses = Map::new();
    let models = route.models(catalogue);
    if let Some(body) = route.body_schema(catalogue) {
        let name = format!("{}Request", upper_first(route.id));
        schemas.insert(name.clone(), body);
        operation.insert("requestBody".into(), json_request_body(schema_ref(&name)));
    }
    if route.kind == Kind::ImagePoll {
        operation.insert(
            "parameters".into(),
            json!([path_parameter(
                "id",
                "The job id the 202 named",
                json!({"type": "string"})
            )]),
        );
    }
    let answer = models.first().and_then(|model| route.example_answer(model));
    match (route.kind, answer) {
        (_, Some((status, example))) => {
            let name = format!("{}Answer", upper_first(route.id));
            schemas.insert(name.clone(), schema_of(&example));
            let mut response = json_response("The answer", Some(schema_ref(&name)));
            response["content"]["application/json"]["example"] = example;
            responses.insert(status.to_string(), response);
        }
        (Kind::OpenApi, None) => {
            responses.insert(
                "200".into(),
                json_response("This document", Some(schema_ref("OpenApi"))),
            );
        }
        (Kind::Health | Kind::Ready, None) => {
            responses.insert("200".into(), json!({"description": "ok / ready"}));
            if route.kind == Kind::Ready {
                responses.insert("503".into(), json!({"description": "not ready"}));
            }
        }
        (_, None) => {
            responses.insert(
                "200".into(),
                json_response("The document", Some(json!({"type": "object"}))),
            );
        }
    }
    if route.is_paid() {
        let mut quote = json_response(
            "Payment required: the x402 quote, also in the PAYMENT-REQUIRED header (base64 JSON); sign its first offer and resend with PAYMENT-SIGNATURE",
            Some(schema_ref("PaymentRequired")),
        );
        quote["headers"] = json!({
            "PAYMENT-REQUIRED": {
                "description": "The quote (x402 v2 PaymentRequired), base64 JSON",
                "schema": { "type": "string" }
            }
        });
        responses.insert("402".into(), quote);
        responses.insert(
            "400".into(),
            json_response(
                "Invalid request body or unknown model",
                Some(json!({"type": "object"})),
            ),
        );
        operation.insert(
            "x-payment-info".into(),
            payment_info(route, &models, quoting),
        );
    }
    operation.insert("responses".into(), Value::Object(responses));
    Value::Object(operation)
}

/// `x-payment-info`: where and how to pay, and each paid model's price of
/// the route's example request, flat fee included.
fn payment_info(route: &Route, models: &[&Model], quoting: &Quoting) -> Value {
    let price: Map<String, Value> = models
        .iter()
        .filter_map(|model| Some((model.id.to_owned(), quoting.example_price(route, model)?)))
        .collect();
    let offer = quoting.offer(quoting.flat_fee);
    json!({
        "scheme": offer.as_ref().map(|offer| offer.scheme.clone()),
        "network": offer.as_ref().map(|offer| offer.network.as_str().to_owned()),
        "asset": offer.as_ref().map(|offer| offer.asset.clone()),
        "payTo": offer.as_ref().map(|offer| offer.pay_to.clone()),
        "price": price,
        "description": "Each paid model's price of this operation's example request, flat fee included; a per-token model's price grows with the prompt and max_tokens (see /.well-known/x402 for its rates), and the 402 names the exact amount.",
    })
}

/// The 402 body's schema.
fn payment_required_schema() -> Value {
    json!({
        "type": "object",
        "required": ["x402Version", "accepts", "error", "resource"],
        "properties": {
            "x402Version": { "type": "integer", "const": 2 },
            "accepts": { "type": "array", "items": {
                "type": "object",
                "required": ["scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds"],
                "properties": {
                    "scheme": { "type": "string" },
                    "network": { "type": "string" },
                    "amount": { "type": "string" },
                    "asset": { "type": "string" },
                    "payTo": { "type": "string" },
                    "maxTimeoutSeconds": { "type": "integer" },
                    "extra": { "type": "object" }
                }
            }},
            "error": { "type": "string" },
            "message": { "type": "string" },
            "price": { "type": "object" },
            "paymentInfo": { "type": "object" },
            "resource": { "type": "object" },
            "extensions": { "type": "object" }
        }
    })
}

/// A schema every value shaped like `example` follows: its types, objects'
/// keys required.
fn schema_of(example: &Value) -> Value {
    match example {
        Value::Null => json!({"type": "null"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(number) if number.is_f64() => json!({"type": "number"}),
        Value::Number(_) => json!({"type": "integer"}),
        Value::String(_) => json!({"type": "string"}),
        Value::Array(items) => match items.first() {
            Some(item) => json!({"type": "array", "items": schema_of(item)}),
            None => json!({"type": "array"}),
        },
        Value::Object(object) => {
            let properties: Map<String, Value> = object
                .iter()
                .map(|(key, value)| (key.clone(), schema_of(value)))
                .collect();
            let required: Vec<&String> = object.keys().collect();
            json!({"type": "object", "required": required, "properties": properties})
        }
    }
}

fn upper_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_ascii_uppercase().to_string() + chars.as_str()
    })
}

/// Both documents, serialised once at start.
#[derive(Clone, Debug)]
pub(crate) struct Documents {
    pub(crate) well_known_x402: Bytes,
    pub(crate) openapi: Bytes,
}

impl Documents {
    pub(crate) fn new(catalogue: &Catalogue, quoting: &Quoting, origin: &str) -> Self {
        Self {
            well_known_x402: Bytes::from(well_known_x402(catalogue, quoting, origin).to_string()),
            openapi: Bytes::from(openapi(catalogue, quoting, origin).to_string()),
        }
    }
}
