//! Paying x402 quotes from Rust: [`X402PaymentLayer`] for any HTTP client
//! service (`hyper_util`'s legacy client, any `Service<Request<B>>`).
//!
//! On a 402 that carries a quote (`PAYMENT-REQUIRED`, or the JSON body's
//! mirror) the layer takes the **first** `accepts` entry — as `@x402/fetch`
//! and `x402-reqwest` do — checks it against the [`SpendPolicy`] (refused:
//! nothing is signed), signs an EIP-3009 `transferWithAuthorization` for it
//! through an alloy [`Signer`](alloy_signer::Signer) (a fresh random 32-byte
//! nonce, `validBefore` = now + `maxTimeoutSeconds`, the EIP-712 domain from
//! `extra`), and resends the request once with `PAYMENT-SIGNATURE`. The
//! request body is buffered (up to [`DEFAULT_MAX_BODY_BYTES`]) to be resent.
//!
//! A request is **never paid twice**: a 402 after the payment is a
//! [`PaymentError`], with no second signature (the one exception is
//! `PAYMENT_BLOCKHASH_STALE`, re-signed once: nothing was charged). The
//! [`RetryPolicy`] lists every other retry; each is counted in [`Attempts`].
//!
//! The service answers `Ok` only with 2xx; a paid answer has a [`Receipt`]
//! in its extensions (from `PAYMENT-RESPONSE`, or for a stream from its
//! final `payment-response` event once the body was read). Errors fall in
//! three classes ([`ClientError`]): [`PaymentError`], [`ApiError`]
//! `{ status, code, body }`, transport. A paid image job answers 202: see
//! [`ImageJob`] to poll it with the same payment.
//!
//! MPP (the `Payment` HTTP authentication scheme): a 402 whose
//! `WWW-Authenticate` carries an `evm`/`charge` challenge is paid the same
//! way (same policy, receipt and errors) with an EIP-3009 `authorization`
//! credential whose nonce is keccak256(id ‖ realm), valid until the
//! challenge's `expires`; the [`Receipt`] then holds the server's
//! `Payment-Receipt` ([`Receipt::mpp_receipt`]). A server offering both is
//! paid through x402 unless the policy prefers [`Protocol::Mpp`]; a server
//! offering only MPP is paid through MPP. Other methods and intents are
//! [`Unsupported`], never signed. Requests carry `Accept-Payment: evm/charge`.
//!
//! Keys never appear in `Debug`, logs or errors; neither do signatures.
//!
//! ```no_run
//! use alloy_signer_local::PrivateKeySigner;
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower::{ServiceBuilder, ServiceExt};
//! use walletgate::client::pay::{Receipt, SpendPolicy, X402PaymentLayer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let key: PrivateKeySigner = std::env::var("WALLETGATE_PRIVATE_KEY")?.parse()?;
//! let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let client = ServiceBuilder::new()
//!     .layer(X402PaymentLayer::new(key).with_policy(SpendPolicy::new().with_max_per_payment_usd("0.05")?))
//!     .service(http);
//! let request = http::Request::post("http://127.0.0.1:8080/v1/chat/completions")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from(r#"{"model":"openai/gpt-5-mini","messages":[{"role":"user","content":"hi"}]}"#)))?;
//! let response = client.oneshot(request).await?;
//! let receipt = response.extensions().get::<Receipt>().cloned();
//! let body = response.into_body().collect().await?.to_bytes();
//! println!("{}", String::from_utf8_lossy(&body));
//! if let Some(receipt) = receipt {
//!     eprintln!("{}", receipt.summary());
//! }
//! # Ok(())
//! # }
//! ```

mod error;
mod failover;
mod future;
mod job;
mod layer;
mod mcp;
mod mpp;
mod payment_id;
mod policy;
mod receipt;
#[cfg(feature = "reqwest")]
pub mod reqwest;
mod retry;
mod service;
mod sign_in;
mod signer;
mod transport;

pub use error::{ApiError, Attempts, BoxError, ClientError, PaymentError, PaymentErrorKind};
pub use failover::{Failover, ModelRow};
pub use future::ResponseFuture;
pub use job::ImageJob;
pub use layer::{DEFAULT_MAX_BODY_BYTES, X402PaymentLayer};
pub use mcp::ToolAnswer;
pub use mpp::{MppReceipt, Protocol, Unsupported, mpp_offer};
pub use payment_id::{IdempotencyKey, InvalidIdempotencyKey};
pub use policy::{
    AllowedAsset, DEFAULT_MAX_PER_PAYMENT, OfferSignatures, QuoteHook, Refusal, SpendPolicy,
    parse_usd,
};
pub use receipt::{PaidBody, Receipt};
pub use retry::{RetryPolicy, SharedSleeper, Sleeper, TokioSleeper, parse_quote};
pub use service::X402Payment;
pub use signer::{PaymentSigner, SignError};
pub use transport::MAX_ERROR_BODY_BYTES;
