//! The embedded model family: answers deterministically, offline.
//!
//! The answer is `"echo: "` followed by the last user message, cut to
//! `max_tokens` words. It checks what a real provider checks first (the
//! output limit, the context window, image URLs), and fails in a real
//! provider's words, so those faults travel the same classification path.

use tokio::sync::mpsc;

use super::{
    BoxFuture, Completion, EventStream, FinishReason, StreamEvent, Upstream, UpstreamFault, Usage,
    word_count,
};
use crate::catalogue::Model;
use crate::request::ChatRequest;
use http::StatusCode;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EchoUpstream;

impl EchoUpstream {
    pub(crate) fn answer(
        model: &Model,
        request: &ChatRequest,
    ) -> Result<Completion, UpstreamFault> {
        let prompt_tokens = request.estimated_prompt_tokens();
        if let Some(max_tokens) = request.max_tokens
            && max_tokens > model.max_output
        {
            return Err(UpstreamFault::new(
                Some(StatusCode::BAD_REQUEST),
                format!(
                    "Invalid 'max_tokens': integer above maximum value. Expected a value <= {}, but got {max_tokens} instead.",
                    model.max_output
                ),
            ));
        }
        if prompt_tokens > model.context_window {
            return Err(UpstreamFault::new(
                Some(StatusCode::BAD_REQUEST),
                format!(
                    "This model's maximum context length is {} tokens. However, your messages resulted in {prompt_tokens} tokens.",
                    model.context_window
                ),
            ));
        }
        if let Some(url) = request.image_urls().into_iter().find(|url| {
            !(url.starts_with("https://")
                || url.starts_with("http://")
                || url.starts_with("data:image/"))
        }) {
            return Err(UpstreamFault::new(
                Some(StatusCode::BAD_REQUEST),
                format!("Invalid image URL: {url}"),
            ));
        }
        let full = format!("echo: {}", request.last_user_text());
        let limit = usize::try_from(request.max_tokens.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
        let words: Vec<&str> = full.split_whitespace().collect();
        let (text, finish) = if words.len() > limit {
            (words[..limit].join(" "), FinishReason::Length)
        } else {
            (words.join(" "), FinishReason::Stop)
        };
        let usage = Usage {
            prompt_tokens,
            completion_tokens: word_count(&text),
        };
        Ok(Completion {
            text,
            finish,
            usage,
        })
    }
}

impl Upstream for EchoUpstream {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>> {
        Box::pin(async move { Self::answer(model, request) })
    }

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>> {
        Box::pin(async move {
            let completion = Self::answer(model, request)?;
            let words: Vec<&str> = completion.text.split(' ').collect();
            // One event per word plus the end: the channel holds them all, so
            // nothing has to run after this returns.
            let (sender, receiver) = mpsc::channel(words.len() + 1);
            for (index, word) in words.iter().enumerate() {
                let text = if index == 0 {
                    (*word).to_owned()
                } else {
                    format!(" {word}")
                };
                let _ = sender.try_send(Ok(StreamEvent::Text(text)));
            }
            let _ = sender.try_send(Ok(StreamEvent::Finished {
                finish: completion.finish,
                usage: completion.usage,
            }));
            Ok(receiver)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Catalogue;
    use crate::request::Endpoint;
    use serde_json::json;

    fn request(text: &str, max_tokens: Option<u64>) -> ChatRequest {
        ChatRequest {
            endpoint: Endpoint::Chat,
            model: "openai/gpt-5-mini".into(),
            messages: vec![json!({"role": "user", "content": text})],
            stream: false,
            max_tokens,
            passthrough: serde_json::Map::new(),
        }
    }

    #[test]
    fn echoes_the_last_user_message() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("openai/gpt-5-mini").unwrap();
        let answer = EchoUpstream::answer(model, &request("hello there", None)).unwrap();
        assert_eq!(answer.text, "echo: hello there");
        assert_eq!(answer.finish, FinishReason::Stop);
        assert_eq!(answer.usage.completion_tokens, 3);
    }

    #[test]
    fn cuts_at_max_tokens() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("openai/gpt-5-mini").unwrap();
        let answer = EchoUpstream::answer(model, &request("one two three", Some(2))).unwrap();
        assert_eq!(answer.text, "echo: one");
        assert_eq!(answer.finish, FinishReason::Length);
    }

    #[tokio::test]
    async fn stream_concatenates_to_the_whole_answer() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("openai/gpt-5-mini").unwrap();
        let request = request("a b c", None);
        let mut events = EchoUpstream.stream(model, &request).await.unwrap();
        let mut text = String::new();
        while let Some(Ok(event)) = events.recv().await {
            match event {
                StreamEvent::Text(more) => text.push_str(&more),
                StreamEvent::Finished { .. } => break,
            }
        }
        assert_eq!(text, EchoUpstream::answer(model, &request).unwrap().text);
    }
}
