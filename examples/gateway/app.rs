//! The router: the inference endpoints behind the pipeline, and the model listing.

use std::sync::Arc;

use crate::images::{ImageJobs, create_image, poll_image};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::config::{Config, PaymentNetwork};
use crate::gateway::{AppState, Gates, Gateway};
use crate::payment::{PaymentSettings, free_tier};
use crate::pipeline::{
    ParsedRequest, ResolvedModel, reject, with_image_pipeline, with_pipeline, with_poll_pipeline,
};
use crate::render::{AnswerHead, SseBody, answer, style_of};
use crate::request::Endpoint;
use crate::upstream::{EchoUpstream, FaultInjecting, ProviderRouter, SharedUpstream};

/// Inference paths; each is also served under `/api`.
const INFERENCE_PATHS: &[&str] = &["/v1/chat/completions", "/v1/messages", "/v1/responses"];

/// The whole gateway for `config`; fails only on an unusable payment setting.
pub(crate) fn app(config: Config) -> Result<Router, walletgate::x402::ConfigError> {
    let mut router = ProviderRouter::new(Arc::new(EchoUpstream));
    for (provider, upstream) in config.providers {
        router = router.with_provider(provider, upstream);
    }
    let upstream: SharedUpstream = Arc::new(FaultInjecting::new(Arc::new(router), config.faults));
    let payments = match &config.network {
        PaymentNetwork::LocalEvm => {
            PaymentSettings::local_evm(&config.pay_to, config.ledger, config.clock.clone())?
        }
        PaymentNetwork::Solana(settings) => {
            let Some(fee_payer) = settings.fee_payer.as_deref() else {
                return Err(walletgate::x402::ConfigError::InvalidFacilitatorUrl(
                    format!(
                        "{}: no fee payer (set GATEWAY_SOLANA_FEE_PAYER or serve it in /supported)",
                        settings.facilitator_url
                    ),
                ));
            };
            PaymentSettings::solana(settings, fee_payer, &config.tls, config.clock.clone())?
        }
    };
    let gates = Gates {
        free_tier: free_tier(config.free_tier),
        inference_payment: payments.inference_layer()?,
        image_payment: payments.image_layer()?,
    };
    let images = ImageJobs::new(config.clock.clone(), config.image_job);
    let state: AppState = Arc::new(Gateway::new(
        config.catalogue,
        upstream,
        config.upstream_timeout,
        config.body_limit_bytes,
        config.clock,
        gates,
        images,
    ));

    let mut inference = Router::new();
    for path in INFERENCE_PATHS {
        inference = inference
            .route(path, post(infer))
            .route(&format!("/api{path}"), post(infer));
    }
    let mut image_jobs = Router::new();
    let mut image_polls = Router::new();
    for base in ["", "/api"] {
        image_jobs = image_jobs.route(&format!("{base}/v1/images/generations"), post(create_image));
        image_polls = image_polls.route(
            &format!("{base}/v1/images/generations/{{id}}"),
            get(poll_image),
        );
    }
    Ok(Router::new()
        .route("/v1/models", get(models))
        .route("/api/v1/models", get(models))
        .merge(with_pipeline(inference, &state))
        .merge(with_image_pipeline(image_jobs, &state))
        .merge(with_poll_pipeline(image_polls, &state))
        .with_state(state))
}

fn json(status: StatusCode, value: &Value) -> Response {
    let mut response = Response::new(Body::from(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn models(State(gateway): State<AppState>) -> Response {
    let mut response = Response::new(Body::from(gateway.listing.clone()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn id_prefix(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "chatcmpl-",
        Endpoint::Messages => "msg_",
        Endpoint::Responses => "resp_",
    }
}

/// Every inference endpoint: the pipeline has validated the request and
/// resolved its model; ask the upstream and render the answer.
async fn infer(
    State(gateway): State<AppState>,
    ParsedRequest(request): ParsedRequest,
    ResolvedModel(model): ResolvedModel,
) -> Response {
    let endpoint = request.endpoint;
    let head = AnswerHead {
        id: gateway.next_id(id_prefix(endpoint)),
        created: gateway.clock.now_unix_secs(),
        model: model.id.to_owned(),
        prompt_tokens: request.estimated_prompt_tokens(),
    };
    if !request.stream {
        return match gateway.complete(&model, &request).await {
            Ok(completion) => json(StatusCode::OK, &answer(endpoint, &head, &completion)),
            Err(error) => reject(error, style_of(endpoint)),
        };
    }
    match gateway.stream(&model, &request).await {
        Ok(events) => {
            let fault_gateway = gateway.clone();
            let idle_timeout = gateway.upstream_timeout;
            let body = SseBody::new(endpoint, head, events, idle_timeout, move |fault| {
                fault_gateway.fault_error(&model, true, fault)
            });
            let mut response = Response::new(Body::new(body));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Err(error) => reject(error, style_of(endpoint)),
    }
}
