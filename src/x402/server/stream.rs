//! [`X402Body`]: the paid response body, which settles a stream when it
//! completes successfully (see the [module docs](super#streams)).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::body::ResponseBody;
use crate::store::BoxFuture;

/// The SSE event that carries a stream's receipt, after its terminal event.
pub const PAYMENT_RESPONSE_EVENT: &str = "payment-response";

/// The longest SSE line kept whole; longer lines are kept truncated (no
/// terminal or error marker is that long, and an oversized `data:` line is
/// ordinary content).
const MAX_LINE_BYTES: usize = 16 * 1024;

pin_project! {
    /// The response body of [`X402`](super::X402): the inner body, a
    /// rejection written by the layer, or a paid stream that settles when
    /// its terminal event arrives and then ends with the receipt event.
    pub struct X402Body<B> {
        #[pin]
        body: ResponseBody<B>,
        // `None`: nothing to settle, the body passes through untouched.
        meter: Option<Box<Meter>>,
    }
}

/// The settlement of a paid stream: run once when it completes, given the
/// stream as sent (`None` when it passed the recording bound).
pub(crate) type Settle = Box<dyn FnOnce(Option<Bytes>) -> BoxFuture<'static, Bytes> + Send>;

/// Told when the client goes away before the stream's terminal event (the
/// body dropped while still streaming, with no error event seen).
pub(crate) type OnCut = Box<dyn FnOnce() + Send>;

struct Meter {
    watch: SseWatch,
    phase: Phase,
    /// The stream so far, kept for a settlement whose outcome is not known
    /// (its answer is kept for the resend); `None` once past `record_limit`.
    recorded: Option<Vec<u8>>,
    record_limit: usize,
    on_cut: Option<OnCut>,
}

impl Drop for Meter {
    fn drop(&mut self) {
        // Still streaming and nothing failed: the reader left early.
        if matches!(self.phase, Phase::Streaming { .. })
            && self.watch.outcome() == Outcome::Open
            && let Some(on_cut) = self.on_cut.take()
        {
            on_cut();
        }
    }
}

impl Meter {
    fn record(&mut self, data: &[u8]) {
        if let Some(recorded) = &mut self.recorded {
            if recorded.len() + data.len() > self.record_limit {
                self.recorded = None;
            } else {
                recorded.extend_from_slice(data);
            }
        }
    }

    fn take_recorded(&mut self) -> Option<Bytes> {
        self.recorded.take().map(Bytes::from)
    }
}

enum Phase {
    /// Forwarding the stream; `settle` runs if it completes.
    Streaming {
        settle: Settle,
    },
    /// The terminal event arrived: settling, with the frame that carried it
    /// held back until then (`None` when the body ended on it).
    Settling {
        future: BoxFuture<'static, Bytes>,
        held: Option<Frame<Bytes>>,
    },
    /// The held frame went out; the receipt event follows.
    Receipt(Bytes),
    Done,
}

impl<B> X402Body<B> {
    /// A body that passes through or was written by a layer.
    pub(crate) fn plain(body: ResponseBody<B>) -> Self {
        Self { body, meter: None }
    }

    /// A paid SSE stream: `settle` runs once its terminal event arrived with
    /// no error event before it (that event is held back until settled), and
    /// its output is sent as the last frame.
    /// Dropping `settle` unrun (a failed, broken or abandoned stream) is how
    /// the claim is given back. Up to `record_limit` bytes of the stream
    /// are recorded and handed to `settle`; `on_cut` is told if the body is
    /// dropped before its terminal event.
    pub(crate) fn settling(
        body: B,
        settle: Settle,
        record_limit: usize,
        on_cut: Option<OnCut>,
    ) -> Self {
        Self {
            body: ResponseBody::inner(body),
            meter: Some(Box::new(Meter {
                watch: SseWatch::default(),
                phase: Phase::Streaming { settle },
                recorded: Some(Vec::new()),
                record_limit,
                on_cut,
            })),
        }
    }

    /// Whether this body was written by the layer rather than the inner service.
    pub fn is_rejection(&self) -> bool {
        self.body.is_rejection()
    }
}

impl<B> Body for X402Body<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        let Some(meter) = this.meter.as_mut() else {
            return this.body.poll_frame(cx);
        };
        loop {
            // Every arm puts the phase back, or leaves `Done` (which drops an
            // unrun `settle`, releasing the claim).
            match std::mem::replace(&mut meter.phase, Phase::Done) {
                Phase::Done => return Poll::Ready(None),
                Phase::Receipt(receipt) => return Poll::Ready(Some(Ok(Frame::data(receipt)))),
                Phase::Settling { mut future, held } => {
                    let Poll::Ready(receipt) = future.as_mut().poll(cx) else {
                        meter.phase = Phase::Settling { future, held };
                        return Poll::Pending;
                    };
                    let Some(frame) = held else {
                        // The body ended inside its terminal event: end that event first.
                        let mut ended = b"\n\n".to_vec();
                        ended.extend_from_slice(&receipt);
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(ended)))));
                    };
                    meter.phase = Phase::Receipt(receipt);
                    return Poll::Ready(Some(Ok(frame)));
                }
                Phase::Streaming { settle } => {
                    let Poll::Ready(next) = this.body.as_mut().poll_frame(cx) else {
                        meter.phase = Phase::Streaming { settle };
                        return Poll::Pending;
                    };
                    match next {
                        Some(Ok(frame)) => {
                            if let Some(data) = frame.data_ref() {
                                meter.watch.feed(data);
                                meter.record(data);
                            }
                            if meter.watch.outcome() == Outcome::Completed {
                                // Held back until settled, so a client that stops
                                // reading at the terminal event cannot abort it.
                                meter.phase = Phase::Settling {
                                    future: settle(meter.take_recorded()),
                                    held: Some(frame),
                                };
                                continue;
                            }
                            meter.phase = Phase::Streaming { settle };
                            return Poll::Ready(Some(Ok(frame)));
                        }
                        // A broken body: unsettled.
                        Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                        None => {
                            meter.watch.finish();
                            if meter.watch.outcome() != Outcome::Completed {
                                return Poll::Ready(None);
                            }
                            let recorded = meter.take_recorded().map(|stream| {
                                // The event the body ended inside is ended here too.
                                let mut ended = stream.to_vec();
                                ended.extend_from_slice(b"\n\n");
                                Bytes::from(ended)
                            });
                            meter.phase = Phase::Settling {
                                future: settle(recorded),
                                held: None,
                            };
                        }
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.meter {
            None => self.body.is_end_stream(),
            Some(meter) => matches!(meter.phase, Phase::Done),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.meter {
            None => self.body.size_hint(),
            // The receipt event is added at the end.
            Some(_) => SizeHint::default(),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for X402Body<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X402Body")
            .field("body", &self.body)
            .field("settling", &self.meter.is_some())
            .finish()
    }
}

/// The receipt event: `event: payment-response` with the `PAYMENT-RESPONSE` value as data.
pub(crate) fn receipt_event(payment_response: &str) -> Bytes {
    Bytes::from(format!(
        "event: {PAYMENT_RESPONSE_EVENT}\ndata: {payment_response}\n\n"
    ))
}

/// Where a watched stream stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Outcome {
    /// No terminal event yet.
    #[default]
    Open,
    /// A terminal event arrived with no error event before it.
    Completed,
    /// An error event arrived: whatever follows, the stream failed.
    Failed,
}

/// Reads SSE events as they pass and decides whether the stream succeeded.
///
/// Terminal: `data: [DONE]` (chat completions), `event: message_stop`
/// (messages), `event: response.completed` (responses). Error: `event: error`,
/// `event: response.failed`, or a `data:` JSON object with an `error` member
/// (how chat completions streams report errors).
#[derive(Debug, Default)]
pub(crate) struct SseWatch {
    line: Vec<u8>,
    line_truncated: bool,
    event: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    outcome: Outcome,
}

impl SseWatch {
    pub(crate) fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Reads the next bytes of the stream.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while self.outcome == Outcome::Open && !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    self.push(&rest[..end]);
                    rest = &rest[end + 1..];
                    self.end_line();
                }
                None => {
                    self.push(rest);
                    rest = &[];
                }
            }
        }
    }

    /// The stream ended: an unterminated last line and event still count.
    pub(crate) fn finish(&mut self) {
        if !self.line.is_empty() {
            self.end_line();
        }
        self.dispatch();
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
        if bytes.len() > room {
            self.line_truncated = true;
        }
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn end_line(&mut self) {
        let mut line = std::mem::take(&mut self.line);
        let truncated = std::mem::replace(&mut self.line_truncated, false);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            self.dispatch();
        } else {
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (&line[..], &[][..]),
            };
            match field {
                b"event" => self.event = value.to_vec(),
                b"data" => {
                    if self.has_data {
                        self.data.push(b'\n');
                    }
                    self.has_data = true;
                    if truncated {
                        // Too long to be a marker: ordinary content.
                        self.data.clear();
                        self.data.extend_from_slice(b"\0oversized");
                    } else {
                        self.data.extend_from_slice(value);
                    }
                }
                _ => {}
            }
        }
        self.line = line;
        self.line.clear();
    }

    fn dispatch(&mut self) {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        let has_data = std::mem::replace(&mut self.has_data, false);
        if self.outcome != Outcome::Open || (event.is_empty() && !has_data) {
            return;
        }
        self.outcome = match &event[..] {
            b"error" | b"response.failed" => Outcome::Failed,
            b"message_stop" | b"response.completed" => Outcome::Completed,
            _ if data == b"[DONE]" => Outcome::Completed,
            _ if reports_error(&data) => Outcome::Failed,
            _ => Outcome::Open,
        };
    }
}

/// A `data:` payload that is a JSON object with a non-null `error` member.
fn reports_error(data: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"\"error\"";
    if !data.windows(NEEDLE.len()).any(|window| window == NEEDLE) {
        return false;
    }
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(data)
        .is_ok_and(|object| object.get("error").is_some_and(|error| !error.is_null()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn outcome_of(chunks: &[&str]) -> Outcome {
        let mut watch = SseWatch::default();
        for chunk in chunks {
            watch.feed(chunk.as_bytes());
        }
        watch.finish();
        watch.outcome()
    }

    #[test]
    fn each_vendors_terminal_event_completes_the_stream() {
        assert_eq!(
            outcome_of(&["data: {\"choices\":[]}\n\n", "data: [DONE]\n\n"]),
            Outcome::Completed
        );
        assert_eq!(
            outcome_of(&[
                "event: message_start\ndata: {}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
            ]),
            Outcome::Completed
        );
        assert_eq!(
            outcome_of(&["event: response.completed\r\ndata: {}\r\n\r\n"]),
            Outcome::Completed
        );
        // Split anywhere, even inside the marker.
        assert_eq!(
            outcome_of(&["da", "ta: [DO", "NE]\n", "\n"]),
            Outcome::Completed
        );
    }

    #[test]
    fn an_error_event_before_the_terminal_one_fails_the_stream() {
        let chat_error = "data: {\"error\":{\"code\":\"MODEL_UNAVAILABLE\"}}\n\n";
        assert_eq!(
            outcome_of(&[chat_error, "data: [DONE]\n\n"]),
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(&[
                "event: error\ndata: {\"type\":\"error\"}\n\n",
                "event: message_stop\ndata: {}\n\n"
            ]),
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(&["event: response.failed\ndata: {}\n\n"]),
            Outcome::Failed
        );
        // Content that merely mentions errors is not an error event.
        assert_eq!(
            outcome_of(&[
                "data: {\"delta\":\"the \\\"error\\\" word\"}\n\n",
                "data: [DONE]\n\n"
            ]),
            Outcome::Completed
        );
        assert_eq!(
            outcome_of(&["data: {\"error\":null}\n\ndata: [DONE]\n\n"]),
            Outcome::Completed
        );
    }

    #[test]
    fn a_stream_that_just_ends_stays_open_and_huge_lines_are_content() {
        assert_eq!(outcome_of(&["data: {\"choices\":[]}\n\n"]), Outcome::Open);
        assert_eq!(outcome_of(&[]), Outcome::Open);
        let huge = format!("data: {}\n\n", "x".repeat(3 * MAX_LINE_BYTES));
        assert_eq!(outcome_of(&[&huge]), Outcome::Open);
        assert_eq!(outcome_of(&[&huge, "data: [DONE]\n\n"]), Outcome::Completed);
        // An unterminated last event still counts when the body ends.
        assert_eq!(outcome_of(&["data: [DONE]"]), Outcome::Completed);
    }

    /// A body yielding scripted frames, one per poll.
    #[derive(Debug)]
    struct Chunks(std::collections::VecDeque<Result<&'static str, &'static str>>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            Poll::Ready(
                self.0
                    .pop_front()
                    .map(|part| part.map(|text| Frame::data(Bytes::from_static(text.as_bytes())))),
            )
        }
    }

    fn chunks(parts: &[Result<&'static str, &'static str>]) -> Chunks {
        Chunks(parts.iter().copied().collect())
    }

    fn metered(body: Chunks, settle: Settle) -> X402Body<Chunks> {
        X402Body::settling(body, settle, 32, None)
    }

    /// A settlement that counts its runs and answers `receipt`.
    fn counting(runs: &Arc<AtomicUsize>) -> Settle {
        let runs = runs.clone();
        Box::new(move |_recorded| {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { receipt_event("cmVjZWlwdA==") })
        })
    }

    #[tokio::test]
    async fn a_completed_stream_settles_once_and_ends_with_the_receipt_event() {
        let runs = Arc::new(AtomicUsize::new(0));
        let body = metered(
            chunks(&[Ok("data: {\"a\":1}\n\n"), Ok("data: [DONE]\n\n")]),
            counting(&runs),
        );
        let mut body = std::pin::pin!(body);
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"data: {\"a\":1}\n\n");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        // The terminal event is released only once settled.
        let terminal = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(&terminal[..], b"data: [DONE]\n\n");
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(
            &rest[..],
            b"event: payment-response\ndata: cmVjZWlwdA==\n\n"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_body_ending_inside_its_terminal_event_still_settles_with_a_separate_receipt() {
        let runs = Arc::new(AtomicUsize::new(0));
        let body = metered(chunks(&[Ok("data: {}\n\ndata: [DONE]")]), counting(&runs));
        let text = body.collect().await.unwrap().to_bytes();
        assert_eq!(
            &text[..],
            b"data: {}\n\ndata: [DONE]\n\nevent: payment-response\ndata: cmVjZWlwdA==\n\n"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_settlement_is_handed_the_stream_as_sent_within_its_bound() {
        for (parts, expected) in [
            (
                &[Ok("data: {}\n\n"), Ok("data: [DONE]")][..],
                Some(&b"data: {}\n\ndata: [DONE]\n\n"[..]),
            ),
            (
                &[
                    Ok("data: {\"long\":\"0123456789abcdef\"}\n\n"),
                    Ok("data: [DONE]\n\n"),
                ][..],
                None,
            ),
        ] {
            let seen = Arc::new(std::sync::Mutex::new(None));
            let keep = seen.clone();
            let settle: Settle = Box::new(move |recorded| {
                *keep.lock().unwrap() = Some(recorded);
                Box::pin(async { Bytes::new() })
            });
            metered(chunks(parts), settle).collect().await.unwrap();
            let recorded = seen.lock().unwrap().take().unwrap();
            assert_eq!(recorded.as_deref(), expected);
        }
    }

    #[tokio::test]
    async fn broken_failed_or_dropped_streams_never_settle() {
        let runs = Arc::new(AtomicUsize::new(0));
        // Ends without its terminal event.
        let body = metered(chunks(&[Ok("data: {\"a\":1}\n\n")]), counting(&runs));
        assert_eq!(
            &body.collect().await.unwrap().to_bytes()[..],
            b"data: {\"a\":1}\n\n"
        );
        // An error event, then the terminal one.
        let body = metered(
            chunks(&[
                Ok("event: error\ndata: {}\n\n"),
                Ok("event: message_stop\ndata: {}\n\n"),
            ]),
            counting(&runs),
        );
        let text = body.collect().await.unwrap().to_bytes();
        assert!(!String::from_utf8_lossy(&text).contains(PAYMENT_RESPONSE_EVENT));
        // The body itself fails.
        let body = metered(chunks(&[Ok("data: {}\n\n"), Err("reset")]), counting(&runs));
        assert_eq!(body.collect().await.unwrap_err(), "reset");
        // The client goes away mid-stream.
        let mut body = metered(
            chunks(&[Ok("data: {}\n\n"), Ok("data: [DONE]\n\n")]),
            counting(&runs),
        );
        assert!(body.frame().await.is_some());
        drop(body);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn only_a_reader_leaving_before_the_end_of_a_sound_stream_is_a_cut() {
        let cuts = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let body = |parts: &[Result<&'static str, &'static str>]| {
            let cuts = cuts.clone();
            let on_cut: OnCut = Box::new(move || {
                cuts.fetch_add(1, Ordering::SeqCst);
            });
            X402Body::settling(chunks(parts), counting(&runs), 32, Some(on_cut))
        };
        // Read to its end: settled, no cut.
        body(&[Ok("data: {}\n\n"), Ok("data: [DONE]\n\n")])
            .collect()
            .await
            .unwrap();
        // An error event, then dropped; a body that breaks: the upstream's fault.
        let mut failed = body(&[Ok("event: error\ndata: {}\n\n"), Ok("data: {}\n\n")]);
        assert!(failed.frame().await.is_some());
        drop(failed);
        let _ = body(&[Ok("data: {}\n\n"), Err("reset")]).collect().await;
        assert_eq!(cuts.load(Ordering::SeqCst), 0);
        // Dropped mid-stream: a cut, told once.
        let mut cut = body(&[Ok("data: {}\n\n"), Ok("data: [DONE]\n\n")]);
        assert!(cut.frame().await.is_some());
        drop(cut);
        assert_eq!(cuts.load(Ordering::SeqCst), 1);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "only the whole stream settled"
        );
    }

    #[tokio::test]
    async fn plain_bodies_pass_through() {
        let body: X402Body<Chunks> =
            X402Body::plain(ResponseBody::inner(chunks(&[Ok("data: [DONE]\n\n")])));
        assert!(!body.is_rejection());
        assert_eq!(
            &body.collect().await.unwrap().to_bytes()[..],
            b"data: [DONE]\n\n"
        );
    }
}
