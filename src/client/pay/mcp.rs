//! Paying an MCP tool: the x402 MCP transport from the client's side. A
//! `tools/call` over streamable HTTP (one POST, no session needed); a
//! PaymentRequired result (`isError` with the quote in `structuredContent`,
//! or its JSON text in `content[0]`) is answered **once**, under the same
//! [`SpendPolicy`] as an HTTP 402, by the same call with the payment in
//! `params._meta["x402/payment"]`; the settlement in the result's
//! `_meta["x402/payment-response"]` becomes the [`Receipt`].

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use serde_json::{Value, json};
use tower_service::Service;

use super::error::{ApiError, Attempts, BoxError, ClientError, PaymentError, PaymentErrorKind};
use super::policy::SpendPolicy;
use super::receipt::{Receipt, is_event_stream};
use super::signer::PaymentSigner;
use super::transport::{read_capped, send};
use crate::envelope::ErrorCode;
use crate::x402::server::mcp::{Answer, PAYMENT_META, PAYMENT_RESPONSE_META};
use crate::x402::wire::codec;
use crate::x402::wire::types::{PaymentPayload, PaymentRequired, SettleResponse};

/// A tool's answer: its MCP result (`content`, `structuredContent`,
/// `isError`, `_meta`) and, when the call was paid, the receipt.
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolAnswer {
    /// The tool result as the server sent it.
    pub result: Value,
    /// The payment's receipt, when the call was paid.
    pub receipt: Option<Receipt>,
}

/// What paying needs from the layer.
pub(super) struct Paying<'a> {
    pub(super) signer: &'a PaymentSigner,
    pub(super) policy: &'a SpendPolicy,
    pub(super) now_unix_secs: u64,
}

/// Calls `tool` with `arguments` on the MCP endpoint `url` through `http`,
/// paying a PaymentRequired result once.
pub(super) async fn call_tool<S, ResBody>(
    paying: Paying<'_>,
    http: S,
    url: &str,
    tool: &str,
    arguments: Value,
) -> Result<ToolAnswer, ClientError>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let mut attempts = Attempts::default();
    let call = json!({"name": tool, "arguments": arguments});
    let result = post(&http, url, &call, &mut attempts).await?;
    let Some(quote) = payment_required(&result) else {
        return Ok(ToolAnswer {
            result,
            receipt: None,
        });
    };
    let payment_error = |kind, attempts| {
        Err(ClientError::Payment(PaymentError {
            kind,
            status: None,
            attempts,
        }))
    };
    let Some(offer) = paying.policy.choose(&quote) else {
        return payment_error(PaymentErrorKind::NoQuote, attempts);
    };
    let checked = (paying
        .policy
        .check_offer(&quote, offer, paying.now_unix_secs))
    .and_then(|()| paying.policy.authorize(offer));
    if let Err(refusal) = checked {
        return payment_error(PaymentErrorKind::Policy(refusal), attempts);
    }
    attempts.signatures += 1;
    let header = match (paying.signer)
        .payment_header(offer, Some(&quote.resource), paying.now_unix_secs)
        .await
    {
        Ok(header) => header,
        Err(error) => return payment_error(PaymentErrorKind::Sign(error), attempts),
    };
    // The transport carries the payload as an object, not the header's base64.
    let payload = codec::decode::<PaymentPayload>(header.as_bytes())
        .ok()
        .and_then(|payload| serde_json::to_value(payload).ok())
        .unwrap_or_default();
    let mut paid_call = call;
    paid_call["_meta"] = json!({ PAYMENT_META: payload });
    let result = post(&http, url, &paid_call, &mut attempts).await?;
    if payment_required(&result).is_some() {
        // Never paid twice: the server's code, else "asked again".
        let code = (result["structuredContent"]["code"].as_str())
            .and_then(ErrorCode::from_wire)
            .filter(|code| code.is_payment());
        let kind = code.map_or(PaymentErrorKind::RequiredAgain, PaymentErrorKind::Refused);
        return payment_error(kind, attempts);
    }
    let receipt = Receipt::new(offer.clone(), header.into()).with_policy(paying.policy.clone());
    let settlement = (result.get("_meta"))
        .and_then(|meta| meta.get(PAYMENT_RESPONSE_META))
        .and_then(|settlement| serde_json::from_value::<SettleResponse>(settlement.clone()).ok());
    if let Some(settlement) = settlement {
        receipt.settle_with(settlement);
    }
    Ok(ToolAnswer {
        result,
        receipt: Some(receipt),
    })
}

/// POSTs one `tools/call` and reads its result; a JSON-RPC error or a
/// failing status is an [`ApiError`].
async fn post<S, ResBody>(
    http: &S,
    url: &str,
    params: &Value,
    attempts: &mut Attempts,
) -> Result<Value, ClientError>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let id = json!(attempts.requests + 1);
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let request = Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .body(Full::new(Bytes::from(message.to_string())))
        .map_err(|error| ClientError::Transport(error.into()))?;
    attempts.requests += 1;
    let response = send(http.clone(), request).await?;
    let (head, body) = response.into_parts();
    let body = read_capped(body).await?;
    let api_error = |status: StatusCode, code: Option<String>, body: Bytes, attempts: Attempts| {
        ClientError::Api(ApiError {
            status,
            code,
            body,
            attempts,
        })
    };
    if !head.status.is_success() {
        return Err(api_error(head.status, None, body, *attempts));
    }
    let Some(answer) = Answer::read(is_event_stream(&head.headers), &body, Some(&id)) else {
        return Err(api_error(head.status, None, body, *attempts));
    };
    match answer.message().get("result") {
        Some(result) => Ok(result.clone()),
        None => {
            let code = answer.message()["error"]["code"]
                .as_i64()
                .map(|code| code.to_string());
            Err(api_error(head.status, code, body, *attempts))
        }
    }
}

/// The quote of a PaymentRequired result: `structuredContent`, else the
/// JSON text of `content[0]`, as the official client reads it.
fn payment_required(result: &Value) -> Option<PaymentRequired> {
    if result.get("isError") != Some(&Value::Bool(true)) {
        return None;
    }
    let structured = result.get("structuredContent").cloned().or_else(|| {
        let text = result["content"][0]["text"].as_str()?;
        serde_json::from_str(text).ok()
    })?;
    serde_json::from_value::<PaymentRequired>(structured)
        .ok()
        .filter(|quote| !quote.accepts.is_empty())
}
