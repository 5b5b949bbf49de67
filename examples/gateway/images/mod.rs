//! Paid image jobs: `POST /v1/images/generations` and polling.
//!
//! A request `{model, prompt, size?, n?}` is validated, priced at the
//! model's per-image price times `n` (plus the flat fee), and paid through an
//! x402 layer in paid-replay mode. The job is keyed by the payment's
//! authorization:
//!
//! * a job that takes time answers **202** `{id, status, poll_url}`; the
//!   payment settles then, since the job is accepted;
//! * `GET poll_url` with the **same** `PAYMENT-SIGNATURE` is a paid replay
//!   (uncharged): 202 with `status` and `progress` until done, then 200
//!   `{created, data:[{url}], status:"completed"}`;
//! * the same signed POST sent again (its answer was lost) gets its kept
//!   answer from the payment layer's answer store (on any replica sharing
//!   it), uncharged, never a second job; if none was kept, the handler finds
//!   the job already paid for by its authorization.
//!
//! Jobs are made by the embedded image family: a deterministic SVG of the
//! prompt as a `data:` URL, ready after the configured duration; [`jobs`]
//! keeps them.

pub(crate) mod jobs;
#[cfg(feature = "redis")]
pub(crate) mod redis_jobs;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use http::request::Parts;
use http::{HeaderValue, StatusCode};
use serde_json::{Map, Value, json};
use walletgate::envelope::{EnvelopeStyle, ErrorCode, GatewayError, UnknownModelBody};
use walletgate::gateway::{BodyCheck, ParsedJson, at, invalid_request_body};
use walletgate::store::StoreError;
use walletgate::x402::server::{PaymentReceipt, Price, RequestPrice};

use self::jobs::{Job, Progress};
use crate::catalogue::Catalogue;
use crate::extensions::{ImageRequest, missing};
use crate::reply::{json, reject};
use crate::state::AppState;

/// Most images one request may ask for.
pub(crate) const MAX_IMAGES: u64 = 4;

/// Validates an image request (the JSON the parse step left) and prices it.
pub(crate) async fn validate_image(
    State(gateway): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let style = EnvelopeStyle::Chat;
    let Some(ParsedJson(value)) = request.extensions_mut().remove::<ParsedJson>() else {
        return missing::<ParsedJson>("JsonBodyLayer", style);
    };
    let (image, price) = match image_request(&gateway.catalogue, value) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    request.extensions_mut().insert(RequestPrice(price));
    request.extensions_mut().insert(image);
    next.run(request).await
}

/// An image request's body read (every problem named) and priced, as the
/// REST route and the MCP tool take it; `Err` is the REST answer.
#[allow(clippy::result_large_err)]
pub(crate) fn image_request(
    catalogue: &Catalogue,
    value: Value,
) -> Result<(ImageRequest, Price), Response> {
    let mut check = BodyCheck::default();
    let Value::Object(object) = value else {
        check.fail(&[], "the body must be a JSON object");
        return Err(invalid(check));
    };
    let fields = image_fields(&mut check, &object);
    let model = match fields.model {
        Some(id) => match catalogue.image_model(id) {
            Some(model) => Some(model.clone()),
            None if check.is_ok() => {
                let suggestions = catalogue.close_matches(id, true);
                return Err(UnknownModelBody::new(id, suggestions)
                    .into_response()
                    .map(Body::from));
            }
            None => None,
        },
        None => None,
    };
    let (Some(model), Some(prompt), true) = (model, fields.prompt, check.is_ok()) else {
        if check.is_ok() {
            check.fail(&at(&[], "model"), "required");
        }
        return Err(invalid(check));
    };
    let Some(price) = model.image_price(fields.count) else {
        check.fail(&at(&[], "model"), "not an image model");
        return Err(invalid(check));
    };
    Ok((
        ImageRequest {
            model,
            prompt: prompt.to_owned(),
            size: fields.size.to_owned(),
            count: fields.count,
        },
        price,
    ))
}

struct ImageFields<'a> {
    model: Option<&'a str>,
    prompt: Option<&'a str>,
    size: &'a str,
    count: u64,
}

fn invalid(check: BodyCheck) -> Response {
    reject(
        invalid_request_body(check.into_details()),
        EnvelopeStyle::Chat,
    )
}

/// The fields of an image request; every problem with them goes to `check`.
fn image_fields<'a>(check: &mut BodyCheck, object: &'a Map<String, Value>) -> ImageFields<'a> {
    let model = match object.get("model") {
        Some(Value::String(model)) if !model.is_empty() => Some(model.as_str()),
        Some(_) => {
            check.fail(&at(&[], "model"), "must be a non-empty string");
            None
        }
        None => {
            check.fail(&at(&[], "model"), "required");
            None
        }
    };
    let prompt = match object.get("prompt") {
        Some(Value::String(prompt)) if !prompt.trim().is_empty() => Some(prompt.as_str()),
        _ => {
            check.fail(&at(&[], "prompt"), "must be a non-empty string");
            None
        }
    };
    let size = match object.get("size") {
        None => "1024x1024",
        Some(Value::String(size)) if is_size(size) => size.as_str(),
        Some(_) => {
            check.fail(&at(&[], "size"), "must be WIDTHxHEIGHT, e.g. 1024x1024");
            "1024x1024"
        }
    };
    let count = match object.get("n") {
        None => 1,
        Some(n) => match n.as_u64().filter(|n| (1..=MAX_IMAGES).contains(n)) {
            Some(n) => n,
            None => {
                check.fail(
                    &at(&[], "n"),
                    format!("must be an integer from 1 to {MAX_IMAGES}"),
                );
                1
            }
        },
    };
    ImageFields {
        model,
        prompt,
        size,
        count,
    }
}

/// The body [`image_fields`] accepts, as a JSON Schema (draft 2020-12),
/// `model` one of `models`.
pub(crate) fn body_schema(models: &[&str]) -> Value {
    json!({
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {
            "model": {"type": "string", "enum": models},
            "prompt": {"type": "string", "minLength": 1},
            "size": {"type": "string", "pattern": "^[0-9]+x[0-9]+$", "default": "1024x1024"},
            "n": {"type": "integer", "minimum": 1, "maximum": MAX_IMAGES, "default": 1},
        },
    })
}

/// A body for `model` that [`image_fields`] accepts.
pub(crate) fn example_body(model: &str) -> Value {
    json!({"model": model, "prompt": "A lighthouse at dawn", "size": "1024x1024", "n": 1})
}

/// The 202 answer of a job still running (also each poll until it is done).
pub(crate) fn running_job(id: &str, percent: u64, model: &str, poll_url: &str) -> Value {
    json!({
        "id": id,
        "object": "image.generation.job",
        "status": if percent == 0 { "queued" } else { "in_progress" },
        "progress": percent,
        "model": model,
        "poll_url": poll_url,
    })
}

fn is_size(text: &str) -> bool {
    text.split_once('x').is_some_and(|(width, height)| {
        [width, height].iter().all(|side| {
            side.parse::<u32>()
                .is_ok_and(|pixels| (64..=4096).contains(&pixels))
        })
    })
}

/// Looks the polled job up and prices the poll as its job, so the same
/// signature matches; an unknown job is 404 before any payment step.
pub(crate) async fn find_job(
    State(gateway): State<AppState>,
    Path(id): Path<String>,
    mut request: Request,
    next: Next,
) -> Response {
    match gateway.images.get(&id).await {
        Ok(Some(job)) => {
            request.extensions_mut().insert(RequestPrice(job.price));
            next.run(request).await
        }
        Ok(None) => job_not_found(),
        Err(error) => store_unavailable(&error),
    }
}

fn job_not_found() -> Response {
    json(StatusCode::NOT_FOUND, &json!({"error": "Job not found"}))
}

/// The job store could not answer: 503, retry the same signed payment (a
/// paid request answered this is not settled).
fn store_unavailable(error: &StoreError) -> Response {
    reject(
        GatewayError::new(ErrorCode::PaymentVerificationUnavailable)
            .with_debug(&format!("image job store: {error}")),
        EnvelopeStyle::Chat,
    )
}

/// `POST /v1/images/generations`: accept the paid job (or find the one this
/// payment already bought) and answer its state.
pub(crate) async fn create_image(
    State(gateway): State<AppState>,
    receipt: PaymentReceipt,
    parts: Parts,
) -> Response {
    let api_prefix = parts.uri.path().starts_with("/api/");
    let job = if receipt.is_replay() {
        match gateway
            .images
            .by_authorization(receipt.authorization_id())
            .await
        {
            Ok(Some(job)) => job,
            Ok(None) => return job_not_found(),
            Err(error) => return store_unavailable(&error),
        }
    } else {
        let Some(request) = parts.extensions.get::<ImageRequest>().cloned() else {
            return missing::<ImageRequest>("validate_image", EnvelopeStyle::Chat);
        };
        let Some(RequestPrice(price)) = parts.extensions.get::<RequestPrice>().copied() else {
            return missing::<RequestPrice>("validate_image", EnvelopeStyle::Chat);
        };
        match gateway
            .images
            .accept(request, price, receipt.authorization_id())
            .await
        {
            Ok(job) => job,
            Err(error) => return store_unavailable(&error),
        }
    };
    job_state(&gateway, &job, api_prefix, &receipt)
}

/// `GET /v1/images/generations/{id}`: the state of a job, for the payment
/// that bought it only.
pub(crate) async fn poll_image(
    State(gateway): State<AppState>,
    Path(id): Path<String>,
    receipt: PaymentReceipt,
    parts: Parts,
) -> Response {
    match gateway.images.get(&id).await {
        Err(error) => store_unavailable(&error),
        Ok(Some(job)) if job.authorization_id == receipt.authorization_id() => job_state(
            &gateway,
            &job,
            parts.uri.path().starts_with("/api/"),
            &receipt,
        ),
        // Another payer's job looks like no job at all.
        _ => job_not_found(),
    }
}

fn job_state(
    gateway: &AppState,
    job: &Job,
    api_prefix: bool,
    receipt: &PaymentReceipt,
) -> Response {
    let prefix = if api_prefix { "/api" } else { "" };
    let mut response = match gateway.images.progress(job) {
        Progress::Running { percent } => json(
            StatusCode::ACCEPTED,
            &running_job(
                &job.id,
                percent,
                job.request.model.id,
                &format!("{prefix}/v1/images/generations/{}", job.id),
            ),
        ),
        Progress::Done => json(
            StatusCode::OK,
            &json!({
                "id": job.id,
                "status": "completed",
                "created": gateway.images.ready_unix_secs(job),
                "model": job.request.model.id,
                "data": (0..job.request.count)
                    .map(|index| json!({
                        "url": rendered_image(&job.request, index),
                        "revised_prompt": job.request.prompt,
                    }))
                    .collect::<Vec<_>>(),
            }),
        ),
    };
    // Media answers name the settlement transaction, once there is one.
    if let Some(transaction) = receipt.transaction()
        && let Ok(value) = HeaderValue::from_str(transaction)
    {
        response.headers_mut().insert("x-payment-receipt", value);
    }
    response
}

/// The embedded image family's picture: an SVG card of the prompt, as a `data:` URL.
fn rendered_image(request: &ImageRequest, index: u64) -> String {
    let (width, height) = request.size.split_once('x').unwrap_or(("1024", "1024"));
    let escaped: String = request
        .prompt
        .chars()
        .take(200)
        .map(|c| match c {
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '&' => "&amp;".to_owned(),
            '"' => "&quot;".to_owned(),
            c => c.to_string(),
        })
        .collect();
    let svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"><rect width="100%" height="100%" fill="#223"/><text x="50%" y="50%" fill="#eee" font-size="32" text-anchor="middle">{escaped} #{}</text></svg>"##,
        index + 1
    );
    format!(
        "data:image/svg+xml;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(svg)
    )
}

/// The job `request` for the payment `receipt`, accepted (the same job again
/// for the same payment) and waited for until done or `wait` has passed:
/// its REST answer (200 done, 202 still running), or the store's 503.
pub(crate) async fn accept_and_wait(
    gateway: &AppState,
    request: ImageRequest,
    price: Price,
    receipt: &PaymentReceipt,
    wait: std::time::Duration,
) -> Response {
    let accepted = (gateway.images)
        .accept(request, price, receipt.authorization_id())
        .await;
    let job = match accepted {
        Ok(job) => job,
        Err(error) => return store_unavailable(&error),
    };
    let waiting = tokio::time::Instant::now();
    loop {
        let running = matches!(gateway.images.progress(&job), Progress::Running { .. });
        if !running || waiting.elapsed() >= wait {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    job_state(gateway, &job, false, receipt)
}
