//! x402 v2 payments: HTTP 402 quotes, verify before, settle after.
//!
//! Three modules by role, as the x402-rs crates split them; every public
//! name has one path:
//!
//! - [`wire`]: the protocol's types, the header [`codec`](wire::codec) and
//!   the EIP-712 typed data an exact-EVM payment signs;
//! - [`server`]: the layer, its service and future, prices, quotes,
//!   receipts and the settlement hook, the settling stream body, the replay
//!   guard;
//! - [`facilitator`]: the verify/settle seam, the in-process EVM facilitator
//!   and its ledgers, the HTTP facilitator client, the Solana options.
//!
//! [`ConfigError`], shared by the layer's builder and the HTTP facilitator, is
//! the only name at the top. The paying side (signing a quote's offer) is
//! `client::payer`.
//!
//! [`X402Layer`](server::X402Layer) puts a price on requests. For each request it asks its
//! [`Pricing`](server::Pricing); a free request passes through untouched. A paid one goes:
//!
//! 1. **quote** — no `PAYMENT-SIGNATURE`: 402 with the offers in
//!    `PAYMENT-REQUIRED`, `X-Payment-Required` and
//!    `WWW-Authenticate: X402 requirements="…"` (one value, standard base64 of
//!    compact JSON), `Cache-Control: no-store`, and a JSON body whose
//!    `x402Version` and `accepts` equal the decoded header. Every amount
//!    includes the layer's flat fee (0.001 USD by default): added to a
//!    [`Price::Usd`](server::Price::Usd), already inside a
//!    [`Price::UsdAllIn`](server::Price::UsdAllIn) ([`Price::total`](server::Price::total)).
//! 2. **decode and match** — the offers are rebuilt for the retried request
//!    and the payment's `accepted` must equal one on every core field
//!    (`PAYMENT_INVALID` otherwise).
//! 3. **claim** — the authorization (network, payer, nonce) is claimed in a
//!    [`NonceStore`](server::NonceStore); a duplicate in flight or already settled gets
//!    `PAYMENT_REPLAY` (see [`replay`](self#replay)).
//! 4. **verify** — the [`Facilitator`](facilitator::Facilitator) checks signature, recipient, amount,
//!    window and funds; its reason becomes `PAYMENT_INVALID`,
//!    `PAYMENT_UNFUNDED`, `PAYMENT_REPLAY` or `PAYMENT_BLOCKHASH_STALE`
//!    ([`code_for_reason`](facilitator::code_for_reason)). An unreachable facilitator is
//!    `PAYMENT_VERIFICATION_UNAVAILABLE` (503, `Retry-After`); nothing is
//!    consumed, so the same payment can be resent.
//! 5. **inner service** — with a [`PaymentReceipt`](server::PaymentReceipt) in the extensions.
//! 6. **settle** — only on a 2xx answer. A whole answer is settled while
//!    its head is held and its body unread: success adds `PAYMENT-RESPONSE`;
//!    failure answers 402 `SETTLEMENT_FAILED` with
//!    `PAYMENT-RESPONSE{success:false}` and drops the inner body. A stream is
//!    settled when it completes (see [Streams](self#streams)). A 4xx/5xx
//!    answer is returned unsettled; a dropped request is never settled. In
//!    every unsettled case the claim is released, so the same payment can be
//!    sent again. A settlement whose outcome is not known (see
//!    [Pending settlements](self#pending-settlements)) is the exception.
//! 7. **hook** — each settled payment is handed once to the
//!    [`SettlementHook`](server::SettlementHook) set with
//!    [`on_settlement`](server::X402LayerBuilder::on_settlement), before a whole
//!    answer is released or when a stream ends.
//!
//! # Streams
//!
//! A 2xx answer whose `Content-Type` is `text/event-stream` is a stream. Its
//! head goes out at once, without `PAYMENT-RESPONSE`, and the layer reads
//! the Server-Sent Events as they pass ([`X402Body`](server::X402Body)). The stream is paid
//! for only if it **completes successfully**: its terminal event arrives —
//! `data: [DONE]` (chat completions), `event: message_stop` (messages) or
//! `event: response.completed` (responses) — with no error event before it
//! (`event: error`, `event: response.failed`, or a `data:` JSON object with
//! an `error` member, as chat completions streams report errors). Then the
//! layer settles — holding back the frame that carried the terminal event
//! until it has, so a client that stops reading at the terminal event cannot
//! cut the settlement short — sends that frame, and ends with one more
//! event, `event: payment-response`, whose `data:` is the base64 settlement
//! the `PAYMENT-RESPONSE` header would have carried (`success:false` if
//! settlement failed); nothing of the inner body after the terminal event
//! is sent.
//!
//! Anything else is not settled and releases the claim: an error event, a
//! body that ends without its terminal event (an upstream that broke or
//! stalled past its timeout), a body error, or a client that disconnects
//! before the terminal event (the body is dropped). An upstream that must
//! report a failure mid-stream therefore sends an error event or simply
//! ends the stream, never a terminal event after an error. A client that
//! disconnects while the settlement itself is in flight (before it saw the
//! terminal event) abandons it: the claim is released, and if the facilitator did
//! settle, the ledger refuses the nonce a second time, so nothing is ever
//! charged twice — but such a settlement reaches neither the client nor the
//! hook. (A whole answer whose client leaves during settlement is the same.)
//!
//! # Facilitators
//!
//! [`LocalEvmFacilitator`](facilitator::LocalEvmFacilitator) verifies exact-EVM payments in-process and settles
//! them through a [`Ledger`](facilitator::Ledger); [`DevLedger`](facilitator::DevLedger) pre-funds the public development
//! accounts on Base Sepolia, so the official clients can pay a local server.
//! With the `http-facilitator` feature, `HttpFacilitator` calls a standard
//! facilitator over HTTP. Any other backend implements [`Facilitator`](facilitator::Facilitator).
//!
//! # Pending settlements
//!
//! A facilitator may not know a settlement's outcome: walletgate's settler
//! broadcast the transfer and saw no receipt within its wait, or an HTTP
//! facilitator's `/settle` answer was lost ([`FacilitatorErrorKind::Pending`](facilitator::FacilitatorErrorKind::Pending)).
//! The transfer may still land, so the layer answers 503
//! `PAYMENT_VERIFICATION_UNAVAILABLE` with `Retry-After` and
//! `PAYMENT-RESPONSE{success:false, errorReason:"settlement_pending",
//! transaction}` — the one 503 that may be charged — **keeps the claim** as
//! a settling record ([`Claim::Settling`](server::Claim::Settling)) until the authorization expires,
//! and keeps the answer in the [`AnswerStore`](server::AnswerStore) (bounded per answer and in
//! total, kept for a retention). A stream whose settlement is pending ends
//! with that `payment-response` event. The client resends the same payment;
//! on any replica sharing the stores the facilitator is asked again: landed →
//! the kept answer with its `PAYMENT-RESPONSE` (no second upstream call; an
//! answer too large to keep is produced again, charged once); still pending →
//! 503 again; failed (the transfer can no longer land) → released, and the
//! same payment may be sent again.
//!
//! # Replay
//!
//! A settled authorization stays spent until its `validBefore` (at least two
//! minutes). With [`with_paid_replay`](server::X402LayerBuilder::with_paid_replay) a route keeps
//! each paid answer (of a known size within the bound) in the answer store:
//! the very same payment sent again for the same request gets that answer
//! with its `PAYMENT-RESPONSE`, and for another request (a poll of the paid
//! job) runs the inner service again with the original receipt
//! ([`PaymentReceipt::is_replay`](server::PaymentReceipt::is_replay)); never a second charge.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use walletgate::clock::SystemClock;
//! use walletgate::x402::facilitator::{DevLedger, LocalEvmFacilitator};
//! use walletgate::x402::server::{PaymentOption, PriceTable, X402Layer};
//! use walletgate::x402::wire::{PaymentRequired, codec};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = X402Layer::builder()
//!     .with_payment_option(PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")?)
//!     .with_pricing(PriceTable::by_route().with_usd("POST /v1/chat/completions", "0.002")?)
//!     .with_facilitator(LocalEvmFacilitator::new(Arc::new(DevLedger::new()), Arc::new(SystemClock)))
//!     .with_public_base_url("https://pay.example")?
//!     .build()?;
//! let service = ServiceBuilder::new().layer(layer).service(service_fn(|_req: Request<Full<Bytes>>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"answer"))))
//! }));
//!
//! let request = Request::post("/v1/chat/completions").body(Full::default())?;
//! let response = service.clone().oneshot(request).await?;
//! assert_eq!(response.status(), 402);
//! let quote: PaymentRequired = codec::decode(response.headers()["payment-required"].as_bytes())?;
//! assert_eq!(quote.accepts[0].amount.units(), 3000); // 0.002 USD + 0.001 USD fee, in USDC units
//!
//! let free = Request::get("/v1/models").body(Full::default())?;
//! assert_eq!(service.oneshot(free).await?.status(), 200);
//! # Ok(())
//! # }
//! ```

mod error;
mod expiring;
pub mod facilitator;
pub mod server;
pub(crate) mod signing_key;
pub mod wire;

pub use error::ConfigError;
