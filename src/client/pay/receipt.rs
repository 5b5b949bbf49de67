//! Receipts: the decoded `PAYMENT-RESPONSE` of a paid answer, from its
//! header or, for a stream, from its final `payment-response` event.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::Buf;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::mpp::{MppReceipt, Protocol};
use super::policy::{SpendPolicy, usd};
use crate::x402::{
    server::PAYMENT_RESPONSE_EVENT,
    wire::{
        AtomicAmount, Network, PaymentRequirements, SettleResponse, SignedReceipt, SignedUsage,
        codec, receipt_of, usage_of,
    },
};

/// The payment behind a paid answer, in its extensions.
///
/// The settlement is there at once for a whole answer (`PAYMENT-RESPONSE`)
/// and once the stream has been read to its `payment-response` event for a
/// stream. Holds the payment header only to poll a paid job with
/// ([`ImageJob`](super::ImageJob)); `Debug` never shows it.
#[derive(Clone)]
pub struct Receipt {
    offer: PaymentRequirements,
    settlement: Arc<OnceLock<SettleResponse>>,
    payment: Arc<str>,
    /// The policy whose budget reserved the signed amount: given back what
    /// a metered settlement did not take.
    policy: Option<SpendPolicy>,
    protocol: Protocol,
    /// The `Payment-Receipt` of an answer paid through MPP.
    mpp: Arc<OnceLock<MppReceipt>>,
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipt")
            .field("amount", &self.offer.amount)
            .field("network", &self.offer.network)
            .field("settlement", &self.settlement.get())
            .field("protocol", &self.protocol)
            .field("mpp", &self.mpp.get())
            .finish_non_exhaustive()
    }
}

impl Receipt {
    pub(crate) fn new(offer: PaymentRequirements, payment: Arc<str>) -> Self {
        Self {
            offer,
            settlement: Arc::new(OnceLock::new()),
            payment,
            policy: None,
            protocol: Protocol::X402,
            mpp: Arc::new(OnceLock::new()),
        }
    }

    /// The receipt of a payment made through `protocol`.
    pub(crate) fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The protocol that paid.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The server's `Payment-Receipt`, for an answer paid through MPP.
    pub fn mpp_receipt(&self) -> Option<&MppReceipt> {
        self.mpp.get()
    }

    /// Reads an MPP answer's `Payment-Receipt`: a `success` one is the
    /// settlement (its `reference` the transaction) of what `payer` signed.
    pub(crate) fn settle_from_mpp(&self, headers: &HeaderMap, payer: &str) {
        let Some(receipt) = MppReceipt::from_headers(headers) else {
            trace_error!("the MPP answer carries no readable Payment-Receipt");
            return;
        };
        if receipt.is_success() {
            self.record(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: Some(payer.to_owned()),
                transaction: receipt.reference.clone(),
                network: self.offer.network.clone(),
                amount: None,
                extensions: None,
            });
        } else {
            trace_error!(status = %receipt.status, "the Payment-Receipt does not say success");
        }
        let _ = self.mpp.set(receipt);
    }

    /// The receipt of a payment `policy` authorized: its budget is charged
    /// the settled amount in the end, not the signed ceiling.
    pub(crate) fn with_policy(mut self, policy: SpendPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Records the settlement (once): an overcharge is logged, and what a
    /// metered settlement did not take goes back to the budget.
    fn record(&self, settlement: SettleResponse) {
        if self.settlement.set(settlement).is_err() {
            return;
        }
        self.alarm_if_overcharged();
        for _failure in self.proof_failures() {
            trace_error!(failure = %_failure, "the settlement's signed proof does not hold");
        }
        if let (Some(policy), Some(settled)) = (&self.policy, self.settled_amount()) {
            policy.refund(&self.offer, settled);
        }
    }

    /// The offer that was signed.
    pub fn offer(&self) -> &PaymentRequirements {
        &self.offer
    }

    /// The amount signed for, in the asset's units.
    pub fn amount(&self) -> AtomicAmount {
        self.offer.amount
    }

    /// The amount as a decimal string of `decimals` (6 for USDC: USD).
    pub fn amount_decimal(&self, decimals: u8) -> String {
        self.offer.amount.to_decimal_string(decimals)
    }

    /// The network paid on.
    pub fn network(&self) -> &Network {
        &self.offer.network
    }

    /// The settlement, once known.
    pub fn settlement(&self) -> Option<&SettleResponse> {
        self.settlement.get()
    }

    /// The settlement's transaction, once known.
    pub fn transaction(&self) -> Option<&str> {
        self.settlement()
            .map(|settlement| settlement.transaction.as_str())
    }

    /// The `PAYMENT-SIGNATURE` value that paid (to poll a paid job; never log it).
    pub(crate) fn payment_header(&self) -> &str {
        &self.payment
    }

    /// What was settled, once known: the settlement's `amount` (a metered
    /// `upto` payment settles what the answer used), else what was signed.
    pub fn settled_amount(&self) -> Option<AtomicAmount> {
        let settlement = self.settlement()?;
        Some(settlement.amount.unwrap_or(self.offer.amount))
    }

    /// Whether the settlement names more than was signed for: a server that
    /// did so broke the scheme (alarm; the chain's permit would refuse it).
    pub fn overcharged(&self) -> bool {
        self.settled_amount()
            .is_some_and(|settled| settled.units() > self.offer.amount.units())
    }

    /// The settlement's signed receipt (`offer-receipt`), if it carries one.
    pub fn signed_receipt(&self) -> Option<SignedReceipt> {
        receipt_of(self.settlement()?)
    }

    /// The settlement's signed usage statement (a metered answer's), if any.
    pub fn usage_statement(&self) -> Option<SignedUsage> {
        usage_of(self.settlement()?)
    }

    /// What does not hold in the settlement's signed proof, once known: a
    /// receipt or usage statement not signed by the server's key (the
    /// policy's [`OfferSignatures`](super::OfferSignatures); a missing
    /// receipt when they are required), a receipt naming another
    /// transaction, a usage statement whose tokens at its prices plus the
    /// fee do not come to the amount settled (or the ceiling). Empty when
    /// all holds, or nothing is signed and nothing is asked.
    pub fn proof_failures(&self) -> Vec<String> {
        let Some(settlement) = self.settlement().filter(|settlement| settlement.success) else {
            return Vec::new();
        };
        let mode = self
            .policy
            .as_ref()
            .map(SpendPolicy::offer_signatures)
            .unwrap_or_default();
        let mut failures = Vec::new();
        match (receipt_of(settlement), mode.signer()) {
            (Some(receipt), Some(signer)) => match receipt.verify(signer) {
                Err(error) => failures.push(format!("the receipt: {error}")),
                Ok(payload) if payload.transaction != settlement.transaction => {
                    failures.push("the receipt names another transaction".to_owned());
                }
                Ok(_) => {}
            },
            (None, _) if matches!(mode, super::OfferSignatures::Require(_)) => {
                failures.push("the settlement carries no signed receipt".to_owned());
            }
            _ => {}
        }
        if let Some(statement) = usage_of(settlement) {
            if let Some(signer) = mode.signer()
                && let Err(error) = statement.verify(signer)
            {
                failures.push(format!("the usage statement: {error}"));
            }
            let usage = &statement.payload;
            if !usage.adds_up(self.offer.amount.units()) {
                let priced = usage.priced_amount().map_or_else(
                    || "an unreadable price".to_owned(),
                    |units| units.to_string(),
                );
                failures.push(format!(
                    "the usage statement does not add up: it names {} units, its tokens at its \
                     prices plus the fee come to {priced}",
                    usage.amount
                ));
            }
            let settled = self.settled_amount().map(|amount| amount.to_string());
            if settled.as_deref() != Some(usage.amount.as_str()) {
                failures.push(format!(
                    "the usage statement names {} units, the settlement {}",
                    usage.amount,
                    settled.unwrap_or_default()
                ));
            }
        }
        failures
    }

    /// One line for a terminal: payer, amount settled (signed, until the
    /// settlement is known), network, transaction. No signature.
    pub fn summary(&self) -> String {
        let settlement = self.settlement();
        let payer = settlement
            .and_then(|settlement| settlement.payer.as_deref())
            .unwrap_or("?");
        let transaction = settlement.map_or("(not settled yet)", |settlement| {
            settlement.transaction.as_str()
        });
        format!(
            "paid {} USD from {payer} on {} tx {transaction}",
            usd(self.settled_amount().unwrap_or(self.offer.amount).units()),
            self.offer.network.as_str()
        )
    }

    /// Records a settlement carried elsewhere than a header (an MCP tool
    /// result's `_meta`).
    pub(crate) fn settle_with(&self, settlement: SettleResponse) {
        self.record(settlement);
    }

    pub(crate) fn settle_from_headers(&self, headers: &HeaderMap) {
        if let Some(settlement) = headers
            .get("payment-response")
            .and_then(|value| codec::decode::<SettleResponse>(value.as_bytes()).ok())
        {
            self.record(settlement);
        }
    }

    /// Logs an overcharge (the caller sees it in [`overcharged`](Self::overcharged)).
    fn alarm_if_overcharged(&self) {
        if self.overcharged() {
            trace_error!(
                signed = %self.offer.amount,
                "the settlement names more than was signed for"
            );
        }
    }
}

/// Longest SSE line the receipt scanner keeps; longer lines pass through unread.
const MAX_LINE_BYTES: usize = 16 * 1024;

pin_project! {
    /// A paid answer's body: passes every frame through and, for a stream,
    /// reads the final `payment-response` event into the [`Receipt`].
    pub struct PaidBody<B> {
        #[pin]
        inner: B,
        scanner: Option<Scanner>,
    }
}

impl<B> PaidBody<B> {
    pub(crate) fn new(inner: B, receipt: Option<&Receipt>, is_stream: bool) -> Self {
        let scanner = receipt.filter(|_| is_stream).map(|receipt| Scanner {
            receipt: receipt.clone(),
            line: Vec::new(),
            overlong: false,
            in_event: false,
        });
        Self { inner, scanner }
    }

    /// The inner body.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: fmt::Debug> fmt::Debug for PaidBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaidBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<B> Body for PaidBody<B>
where
    B: Body,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if let (Some(scanner), Some(Ok(frame))) = (this.scanner.as_mut(), frame.as_ref())
            && let Some(data) = frame.data_ref()
        {
            scanner.feed(data.chunk());
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Reads SSE lines for `event: payment-response` and its `data:`.
struct Scanner {
    receipt: Receipt,
    line: Vec<u8>,
    overlong: bool,
    in_event: bool,
}

impl Scanner {
    fn feed(&mut self, mut data: &[u8]) {
        while let Some(end) = data.iter().position(|byte| *byte == b'\n') {
            self.push(&data[..end]);
            let line = std::mem::take(&mut self.line);
            if !std::mem::take(&mut self.overlong) {
                self.line_done(line.strip_suffix(b"\r").unwrap_or(&line));
            }
            data = &data[end + 1..];
        }
        self.push(data);
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            self.overlong = true;
            self.line.clear();
        } else if !self.overlong {
            self.line.extend_from_slice(bytes);
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.in_event = false;
        } else if let Some(name) = line.strip_prefix(b"event:") {
            self.in_event = name.trim_ascii() == PAYMENT_RESPONSE_EVENT.as_bytes();
        } else if let Some(data) = line.strip_prefix(b"data:")
            && self.in_event
            && let Ok(settlement) = codec::decode::<SettleResponse>(data.trim_ascii())
        {
            self.receipt.record(settlement);
        }
    }
}

/// Whether a response head is a Server-Sent Events stream.
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::BodyExt;

    use super::*;
    use crate::x402::facilitator::DevLedger;
    use crate::x402::server::PaymentOption;

    fn receipt() -> Receipt {
        let offer = PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
            .unwrap()
            .requirements_for_amount(AtomicAmount::new(3_000));
        Receipt::new(offer, Arc::from("header"))
    }

    /// A settlement of development account 1's payment in `0xfeed`.
    fn settled(amount: Option<AtomicAmount>) -> SettleResponse {
        SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            payer: Some(DevLedger::DEV_ACCOUNTS[1].into()),
            transaction: "0xfeed".into(),
            network: Network::base_sepolia(),
            amount,
            extensions: None,
        }
    }

    /// A metered payment reserves its ceiling in the budget and, once its
    /// settlement is known, costs what was settled; the line says so.
    #[test]
    fn a_metered_settlement_gives_the_unused_ceiling_back_to_the_budget() {
        let policy =
            SpendPolicy::new().with_budget(crate::x402::wire::UsdAmount::from_micros(10_000));
        let receipt = receipt().with_policy(policy.clone());
        policy.authorize(receipt.offer()).unwrap();
        assert_eq!(policy.spent_micros(), Some(3_000), "the ceiling reserved");
        let mut headers = HeaderMap::new();
        let settled = settled(Some(AtomicAmount::new(1_234)));
        headers.insert("payment-response", codec::encode(&settled).parse().unwrap());
        receipt.settle_from_headers(&headers);
        assert_eq!(policy.spent_micros(), Some(1_234));
        assert!(
            receipt.summary().starts_with("paid 0.001234 USD"),
            "{}",
            receipt.summary()
        );
        assert!(!receipt.overcharged());
        // Told twice, given back once.
        receipt.settle_from_headers(&headers);
        assert_eq!(policy.spent_micros(), Some(1_234));
    }

    #[tokio::test]
    async fn a_streams_final_payment_response_event_is_its_receipt() {
        let settlement = settled(None);
        let event = format!(
            "data: {{\"x\":1}}\n\ndata: [DONE]\n\nevent: {PAYMENT_RESPONSE_EVENT}\r\ndata: {}\n\n",
            codec::encode(&settlement)
        );
        // Split at every third byte: lines cross frames.
        let chunks = event
            .as_bytes()
            .chunks(3)
            .map(Bytes::copy_from_slice)
            .collect();
        let receipt = receipt();
        let body = PaidBody::new(Chunks(chunks), Some(&receipt), true);
        assert!(receipt.settlement().is_none());
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(all, event.as_bytes());
        assert_eq!(receipt.settlement(), Some(&settlement));
        assert_eq!(receipt.transaction(), Some("0xfeed"));
        let line = receipt.summary();
        assert!(
            line.contains("0.003 USD") && line.contains("0xfeed"),
            "{line}"
        );
        assert!(!format!("{receipt:?}").contains("header"));
    }

    /// A body of several data frames.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }
}
