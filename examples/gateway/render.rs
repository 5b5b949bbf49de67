//! Success shapes of the three endpoints, whole and streamed.
//!
//! Streams are Server-Sent Events: chat sends `data: {chunk}` lines and ends
//! with `data: [DONE]` (the SDKs read nothing else); messages and responses
//! send their vendors' named events (`event: …` then `data: {…}`). A stream
//! broken by an upstream fault ends with an error event and no terminal
//! event, so the payment layer leaves it unsettled; a paid stream that
//! completes gets its receipt from the layer as a last `event: payment-response`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use serde_json::{Value, json};
use tokio::time::Sleep;
use walletgate::envelope::{ErrorCode, GatewayError};

use crate::request::Endpoint;
use crate::upstream::{Completion, EventStream, FinishReason, StreamEvent, UpstreamFault, Usage};

/// What every rendered answer names.
#[derive(Clone, Debug)]
pub(crate) struct AnswerHead {
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
    /// The gateway's prompt estimate, for stream starts (the upstream reports usage at the end).
    pub(crate) prompt_tokens: u64,
}

/// The whole answer in `endpoint`'s shape.
pub(crate) fn answer(endpoint: Endpoint, head: &AnswerHead, completion: &Completion) -> Value {
    match endpoint {
        Endpoint::Chat => chat_completion(head, completion),
        Endpoint::Messages => message(head, completion),
        Endpoint::Responses => response(head, &completion.text, completion.usage, "completed"),
    }
}

fn chat_completion(head: &AnswerHead, completion: &Completion) -> Value {
    json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": completion.text},
            "finish_reason": completion.finish.openai(),
        }],
        "usage": chat_usage(completion.usage),
    })
}

fn chat_usage(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

fn message(head: &AnswerHead, completion: &Completion) -> Value {
    json!({
        "id": head.id,
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": completion.text}],
        "model": head.model,
        "stop_reason": completion.finish.anthropic(),
        "stop_sequence": null,
        "usage": {
            "input_tokens": completion.usage.prompt_tokens,
            "output_tokens": completion.usage.completion_tokens,
        },
    })
}

fn response(head: &AnswerHead, text: &str, usage: Usage, status: &str) -> Value {
    let output = if status == "completed" {
        json!([{
            "type": "message",
            "id": format!("msg_{}", head.id.trim_start_matches("resp_")),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }])
    } else {
        json!([])
    };
    json!({
        "id": head.id,
        "object": "response",
        "created_at": head.created,
        "status": status,
        "model": head.model,
        "output": output,
        "output_text": text,
        "usage": {
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        },
    })
}

/// Turns stream events into one endpoint's SSE bytes.
struct SseEncoder {
    endpoint: Endpoint,
    head: AnswerHead,
    started: bool,
    /// The text so far (the responses stream repeats it whole at the end).
    text: String,
}

fn data(out: &mut String, value: &Value) {
    out.push_str("data: ");
    out.push_str(&value.to_string());
    out.push_str("\n\n");
}

fn event(out: &mut String, name: &str, value: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push('\n');
    data(out, value);
}

impl SseEncoder {
    fn chunk(&self, delta: Value, finish: Option<FinishReason>) -> Value {
        json!({
            "id": self.head.id,
            "object": "chat.completion.chunk",
            "created": self.head.created,
            "model": self.head.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish.map(FinishReason::openai)}],
        })
    }

    /// What opens the stream, before the first piece of text.
    fn start(&mut self, out: &mut String) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let usage = Usage {
            prompt_tokens: self.head.prompt_tokens,
            completion_tokens: 0,
        };
        match self.endpoint {
            Endpoint::Chat => data(
                out,
                &self.chunk(json!({"role": "assistant", "content": ""}), None),
            ),
            Endpoint::Messages => {
                let mut opening = message(
                    &self.head,
                    &Completion {
                        text: String::new(),
                        finish: FinishReason::Stop,
                        usage,
                    },
                );
                opening["content"] = json!([]);
                opening["stop_reason"] = Value::Null;
                event(
                    out,
                    "message_start",
                    &json!({"type": "message_start", "message": opening}),
                );
                event(
                    out,
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                );
            }
            Endpoint::Responses => event(
                out,
                "response.created",
                &json!({"type": "response.created", "response": response(&self.head, "", usage, "in_progress")}),
            ),
        }
    }

    fn encode(&mut self, step: Result<StreamEvent, GatewayError>) -> (String, bool) {
        let mut out = String::new();
        self.start(&mut out);
        let done = match step {
            Ok(StreamEvent::Text(text)) => {
                self.text.push_str(&text);
                match self.endpoint {
                    Endpoint::Chat => data(&mut out, &self.chunk(json!({"content": text}), None)),
                    Endpoint::Messages => event(
                        &mut out,
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                    ),
                    Endpoint::Responses => event(
                        &mut out,
                        "response.output_text.delta",
                        &json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": text}),
                    ),
                }
                false
            }
            Ok(StreamEvent::Finished { finish, usage }) => {
                self.finish(&mut out, finish, usage);
                true
            }
            Err(error) => {
                self.fail(&mut out, &error);
                true
            }
        };
        (out, done)
    }

    fn finish(&self, out: &mut String, finish: FinishReason, usage: Usage) {
        match self.endpoint {
            Endpoint::Chat => {
                let mut last = self.chunk(json!({}), Some(finish));
                last["usage"] = chat_usage(usage);
                data(out, &last);
                out.push_str("data: [DONE]\n\n");
            }
            Endpoint::Messages => {
                event(
                    out,
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": 0}),
                );
                event(
                    out,
                    "message_delta",
                    &json!({"type": "message_delta", "delta": {"stop_reason": finish.anthropic(), "stop_sequence": null}, "usage": {"output_tokens": usage.completion_tokens}}),
                );
                event(out, "message_stop", &json!({"type": "message_stop"}));
            }
            Endpoint::Responses => event(
                out,
                "response.completed",
                &json!({"type": "response.completed", "response": response(&self.head, &self.text, usage, "completed")}),
            ),
        }
    }

    /// A fault after the 200 went out: the status cannot change, so the
    /// error travels as the stream's last event, in the endpoint's error
    /// shape, and no terminal event follows (`[DONE]`, `message_stop`,
    /// `response.completed`): the stream is recognisably broken, and the
    /// payment layer leaves it unsettled.
    fn fail(&self, out: &mut String, error: &GatewayError) {
        match self.endpoint {
            Endpoint::Chat => data(
                out,
                &serde_json::to_value(error.chat_body()).unwrap_or_default(),
            ),
            Endpoint::Messages => event(
                out,
                "error",
                &serde_json::to_value(error.messages_body()).unwrap_or_default(),
            ),
            Endpoint::Responses => {
                let body = error.responses_body();
                event(
                    out,
                    "error",
                    &json!({"type": "error", "code": body.error.code, "message": body.error.message, "param": body.error.param}),
                );
            }
        }
    }
}

/// An SSE response body fed by an upstream's events.
///
/// An upstream silent for longer than the idle timeout ends the stream with a
/// `TIMEOUT` error event, so a stalled upstream never holds a client forever.
pub(crate) struct SseBody<F> {
    events: EventStream,
    encoder: SseEncoder,
    fault_error: F,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    done: bool,
    /// Told the usage when the stream finishes, before its last chunk goes out.
    on_usage: Option<Box<dyn FnOnce(Usage) + Send>>,
    /// The upstream's first event, already read before the answer's head.
    first: Option<StreamEvent>,
}

impl<F> SseBody<F>
where
    F: Fn(&UpstreamFault) -> GatewayError,
{
    /// `fault_error` turns a mid-stream fault into the error the client sees.
    pub(crate) fn new(
        endpoint: Endpoint,
        head: AnswerHead,
        events: EventStream,
        idle_timeout: Duration,
        fault_error: F,
    ) -> Self {
        Self {
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            events,
            encoder: SseEncoder {
                endpoint,
                head,
                started: false,
                text: String::new(),
            },
            fault_error,
            done: false,
            on_usage: None,
            first: None,
        }
    }

    /// Starts with `event`, the upstream's first, read before the head.
    pub(crate) fn with_first(mut self, event: StreamEvent) -> Self {
        self.first = Some(event);
        self
    }

    /// Tells `on_usage` the usage the upstream reported with the stream's
    /// last chunk (a metered payment settles it when the stream ends).
    pub(crate) fn on_usage(mut self, on_usage: impl FnOnce(Usage) + Send + 'static) -> Self {
        self.on_usage = Some(Box::new(on_usage));
        self
    }
}

impl<F> Body for SseBody<F>
where
    F: Fn(&UpstreamFault) -> GatewayError + Unpin,
{
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let received = match this.first.take() {
            Some(event) => Poll::Ready(Some(Ok(event))),
            None => this.events.poll_recv(cx),
        };
        let step = match received {
            Poll::Ready(Some(Ok(event))) => Ok(event),
            Poll::Ready(Some(Err(fault))) => Err((this.fault_error)(&fault)),
            // The upstream side vanished without finishing: a broken stream.
            Poll::Ready(None) => Err((this.fault_error)(&UpstreamFault::new(
                None,
                "upstream stream closed early: connection reset",
            ))),
            Poll::Pending => match this.idle.as_mut().poll(cx) {
                Poll::Ready(()) => Err(GatewayError::new(ErrorCode::Timeout)),
                Poll::Pending => return Poll::Pending,
            },
        };
        let deadline = tokio::time::Instant::now() + this.idle_timeout;
        this.idle.as_mut().reset(deadline);
        if let Ok(StreamEvent::Finished { usage, .. }) = &step
            && let Some(on_usage) = this.on_usage.take()
        {
            on_usage(*usage);
        }
        let (text, done) = this.encoder.encode(step);
        this.done = done;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(text)))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
