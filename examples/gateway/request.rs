//! The three request bodies (chat, messages, responses), their validation and
//! their mapping onto one internal chat request.
//!
//! Validation walks the JSON value by hand so that every failure carries the
//! exact path of the offending field (`details[].path`), and it reports all
//! failures at once instead of the first.

use serde_json::{Map, Value, json};
use walletgate::envelope::{DetailPathSegment, EnvelopeStyle, ValidationDetail};
use walletgate::gateway::{BodyCheck, DetailPath, at};

/// Which endpoint a request came in on: it decides the body schema, the
/// success shape and the error envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/v1/chat/completions`: OpenAI chat.
    Chat,
    /// `/v1/messages`: Anthropic messages.
    Messages,
    /// `/v1/responses`: OpenAI responses.
    Responses,
}

impl Endpoint {
    /// The envelope the endpoint's rejections come in; the router sets it once.
    pub(crate) fn style(self) -> EnvelopeStyle {
        match self {
            Self::Chat => EnvelopeStyle::Chat,
            Self::Messages => EnvelopeStyle::Messages,
            Self::Responses => EnvelopeStyle::Responses,
        }
    }
}

impl Endpoint {
    /// The body this endpoint's validation below accepts, as a JSON Schema
    /// (draft 2020-12), `model` one of `models`; kept beside the validator,
    /// and the tests check the two agree on the examples.
    pub(crate) fn body_schema(self, models: &[&str]) -> Value {
        let model = json!({"type": "string", "enum": models});
        let count = json!({"type": "integer", "minimum": 1});
        let number = json!({"type": "number"});
        let content = json!({"type": ["string", "array"]});
        match self {
            Self::Chat => json!({
                "type": "object",
                "required": ["model", "messages"],
                "properties": {
                    "model": model,
                    "messages": {"type": "array", "items": {
                        "type": "object",
                        "required": ["role"],
                        "properties": {
                            "role": {"type": "string", "enum": CHAT_ROLES},
                            "content": {"type": ["string", "array", "null"]},
                        },
                    }},
                    "stream": {"type": "boolean"},
                    "max_tokens": count,
                    "max_completion_tokens": count,
                    "temperature": number,
                    "top_p": number,
                },
            }),
            Self::Messages => json!({
                "type": "object",
                "required": ["model", "max_tokens", "messages"],
                "properties": {
                    "model": model,
                    "max_tokens": count,
                    "system": {"type": ["string", "array"]},
                    "messages": {"type": "array", "items": {
                        "type": "object",
                        "required": ["role", "content"],
                        "properties": {
                            "role": {"type": "string", "enum": ["user", "assistant"]},
                            "content": content,
                        },
                    }},
                    "stream": {"type": "boolean"},
                    "temperature": number,
                },
            }),
            Self::Responses => json!({
                "type": "object",
                "required": ["model", "input"],
                "properties": {
                    "model": model,
                    "input": {"type": ["string", "array"]},
                    "instructions": {"type": "string"},
                    "max_output_tokens": count,
                    "stream": {"type": "boolean"},
                    "temperature": number,
                },
            }),
        }
    }

    /// A one-turn body for `model` that the validation accepts.
    pub(crate) fn example_body(self, model: &str) -> Value {
        match self {
            Self::Chat => json!({"model": model, "max_tokens": 64, "messages": [
                {"role": "user", "content": "Say hello"}
            ]}),
            Self::Messages => json!({"model": model, "max_tokens": 64, "messages": [
                {"role": "user", "content": "Say hello"}
            ]}),
            Self::Responses => {
                json!({"model": model, "max_output_tokens": 64, "input": "Say hello"})
            }
        }
    }
}

/// A validated request of any endpoint, in OpenAI chat form.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ChatRequest {
    pub(crate) endpoint: Endpoint,
    /// The requested model id, as sent.
    pub(crate) model: String,
    /// Chat messages (`{role, content}` with string or part-array content).
    pub(crate) messages: Vec<Value>,
    pub(crate) stream: bool,
    /// Output token limit (`max_tokens`, `max_completion_tokens` or `max_output_tokens`).
    pub(crate) max_tokens: Option<u64>,
    /// Every other field of a chat body, forwarded to an OpenAI-compatible upstream.
    pub(crate) passthrough: Map<String, Value>,
}

impl ChatRequest {
    /// Validates `body` against `endpoint`'s schema and maps it.
    pub(crate) fn from_json(
        endpoint: Endpoint,
        body: Value,
    ) -> Result<Self, Vec<ValidationDetail>> {
        let mut check = BodyCheck::default();
        let Value::Object(object) = body else {
            check.fail(&[], "the body must be a JSON object");
            return Err(check.into_details());
        };
        let request = match endpoint {
            Endpoint::Chat => chat(&mut check, object),
            Endpoint::Messages => messages(&mut check, &object),
            Endpoint::Responses => responses(&mut check, &object),
        };
        if check.is_ok() {
            Ok(request)
        } else {
            Err(check.into_details())
        }
    }

    /// Whether any message is something other than system instructions.
    pub(crate) fn has_conversation(&self) -> bool {
        self.messages.iter().any(|message| {
            !matches!(
                message.get("role").and_then(Value::as_str),
                Some("system" | "developer")
            )
        })
    }

    /// Prompt tokens, estimated as one per four characters (rounded up) of
    /// all text of all messages, joined by newlines: deterministic, so a
    /// quote and its paid retry agree. Counted in place, not copied: every
    /// paid request is priced with it.
    pub(crate) fn estimated_prompt_tokens(&self) -> u64 {
        let mut chars = 0usize;
        let mut joined_any = false;
        for piece in self
            .messages
            .iter()
            .flat_map(|message| text_pieces(message.get("content")))
            .filter(|piece| !piece.is_empty())
        {
            chars += usize::from(joined_any) + piece.chars().count();
            joined_any = true;
        }
        u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
    }

    /// The text of the last user message.
    pub(crate) fn last_user_text(&self) -> String {
        let mut text = String::new();
        if let Some(message) = self
            .messages
            .iter()
            .rev()
            .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        {
            push_text(&mut text, message.get("content"));
        }
        text
    }

    /// `image_url`s of all messages, in order.
    pub(crate) fn image_urls(&self) -> Vec<&str> {
        self.messages
            .iter()
            .filter_map(|message| message.get("content").and_then(Value::as_array))
            .flatten()
            .filter_map(|part| {
                let image = part.get("image_url")?;
                image.get("url").unwrap_or(image).as_str()
            })
            .collect()
    }
}

/// The text pieces of a message's `content`, in order: the string, or each
/// part's `text`.
fn text_pieces(content: Option<&Value>) -> impl Iterator<Item = &str> {
    let (plain, parts) = match content {
        Some(Value::String(plain)) => (Some(plain.as_str()), &[][..]),
        Some(Value::Array(parts)) => (None, parts.as_slice()),
        _ => (None, &[][..]),
    };
    plain.into_iter().chain(
        parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str)),
    )
}

fn push_text(text: &mut String, content: Option<&Value>) {
    for piece in text_pieces(content) {
        join(text, piece);
    }
}

fn join(text: &mut String, more: &str) {
    if !text.is_empty() && !more.is_empty() {
        text.push('\n');
    }
    text.push_str(more);
}

const CHAT_ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];
const CHAT_FIELDS: &[&str] = &["model", "messages", "stream", "max_tokens"];

/// `/v1/chat/completions`: OpenAI chat body.
fn chat(check: &mut BodyCheck, mut object: Map<String, Value>) -> ChatRequest {
    let model = check.required_string(&object, "model");
    let stream = check.optional_bool(&object, "stream");
    let max_tokens = check
        .optional_count(&object, "max_tokens")
        .or_else(|| check.optional_count(&object, "max_completion_tokens"));
    for key in [
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
    ] {
        check.optional_number(&object, key);
    }
    check.optional_count(&object, "n");
    let path = [DetailPathSegment::from("messages")];
    for (index, message) in check
        .array(object.get("messages"), &path)
        .iter()
        .enumerate()
    {
        chat_message(check, message, &at(&path, index));
    }
    // Moved out, not copied: the body is ours.
    let messages = match object.remove("messages") {
        Some(Value::Array(messages)) => messages,
        _ => Vec::new(),
    };
    object.retain(|key, _| !CHAT_FIELDS.contains(&key.as_str()));
    ChatRequest {
        endpoint: Endpoint::Chat,
        model,
        messages,
        stream,
        max_tokens,
        passthrough: object,
    }
}

fn chat_message(check: &mut BodyCheck, message: &Value, path: &DetailPath) {
    let Some(message) = check.object(message, path) else {
        return;
    };
    let role = message.get("role").and_then(Value::as_str);
    match role {
        Some(role) if CHAT_ROLES.contains(&role) => {}
        Some(_) => check.fail(
            &at(path, "role"),
            format!("must be one of {}", CHAT_ROLES.join(", ")),
        ),
        None => check.fail(&at(path, "role"), "must be a string"),
    }
    // Built only for parts or a failure: most content is one string.
    let content_path = || at(path, "content");
    match message.get("content") {
        Some(Value::String(_)) => {}
        // An assistant turn that only calls tools has no content.
        None | Some(Value::Null) if role == Some("assistant") => {}
        Some(Value::Array(parts)) => {
            let content_path = content_path();
            for (index, part) in parts.iter().enumerate() {
                chat_part(check, part, &at(&content_path, index));
            }
        }
        _ => check.fail(
            &content_path(),
            "must be a string or an array of content parts",
        ),
    }
}

fn chat_part(check: &mut BodyCheck, part: &Value, path: &DetailPath) {
    let Some(part) = check.object(part, path) else {
        return;
    };
    match check.part_type(part, path) {
        Some("text") => {
            check.text_field(part, "text", path);
        }
        Some("image_url") => {
            let url = part
                .get("image_url")
                .map(|image| image.get("url").unwrap_or(image));
            if url.and_then(Value::as_str).is_none() {
                check.fail(&at(&at(path, "image_url"), "url"), "must be a string");
            }
        }
        Some("input_audio" | "file") | None => {}
        Some(other) => check.fail(
            &at(path, "type"),
            format!("unknown content part type {other:?}"),
        ),
    }
}

/// `/v1/messages`: Anthropic messages body.
fn messages(check: &mut BodyCheck, object: &Map<String, Value>) -> ChatRequest {
    let model = check.required_string(object, "model");
    let stream = check.optional_bool(object, "stream");
    let max_tokens = check.optional_count(object, "max_tokens");
    if !object.contains_key("max_tokens") {
        check.fail(&[DetailPathSegment::from("max_tokens")], "is required");
    }
    for key in ["temperature", "top_p", "top_k"] {
        check.optional_number(object, key);
    }
    let mut mapped = Vec::new();
    match object.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(system)) => mapped.push(json!({"role": "system", "content": system})),
        Some(Value::Array(blocks)) => {
            let path = [DetailPathSegment::from("system")];
            let mut text = String::new();
            for (index, block) in blocks.iter().enumerate() {
                let block_path = at(&path, index);
                if let Some(block) = check.object(block, &block_path) {
                    join(&mut text, &check.text_field(block, "text", &block_path));
                }
            }
            mapped.push(json!({"role": "system", "content": text}));
        }
        Some(_) => check.fail(
            &[DetailPathSegment::from("system")],
            "must be a string or an array of text blocks",
        ),
    }
    let path = [DetailPathSegment::from("messages")];
    for (index, message) in check
        .array(object.get("messages"), &path)
        .iter()
        .enumerate()
    {
        if let Some(message) = anthropic_message(check, message, &at(&path, index)) {
            mapped.push(message);
        }
    }
    ChatRequest {
        endpoint: Endpoint::Messages,
        model,
        messages: mapped,
        stream,
        max_tokens,
        passthrough: Map::new(),
    }
}

fn anthropic_message(check: &mut BodyCheck, message: &Value, path: &DetailPath) -> Option<Value> {
    let message = check.object(message, path)?;
    Some(mapped_message(
        check,
        message,
        path,
        &["user", "assistant"],
        anthropic_block,
    ))
}

/// One Anthropic content block in chat form; tool and thinking blocks carry
/// no prompt text for the echo family and are not sent upstream.
fn anthropic_block(
    check: &mut BodyCheck,
    block: &Map<String, Value>,
    path: &DetailPath,
) -> Option<Value> {
    match check.part_type(block, path)? {
        "text" => {
            let text = check.text_field(block, "text", path);
            Some(json!({"type": "text", "text": text}))
        }
        "image" => {
            let url = block
                .get("source")
                .and_then(Value::as_object)
                .and_then(anthropic_image_url);
            if url.is_none() {
                check.fail(
                    &at(path, "source"),
                    "must be {type:\"url\", url} or {type:\"base64\", media_type, data}",
                );
            }
            Some(json!({"type": "image_url", "image_url": {"url": url?}}))
        }
        _ => None,
    }
}

/// A vendor's `{role, content}` message in chat form: `role` one of `roles`,
/// `content` a string or parts that `map_part` maps (`None`: no prompt in it).
fn mapped_message(
    check: &mut BodyCheck,
    message: &Map<String, Value>,
    path: &DetailPath,
    roles: &[&str],
    map_part: fn(&mut BodyCheck, &Map<String, Value>, &DetailPath) -> Option<Value>,
) -> Value {
    let role = message.get("role").and_then(Value::as_str);
    if !role.is_some_and(|role| roles.contains(&role)) {
        check.fail(
            &at(path, "role"),
            format!("must be one of {}", roles.join(", ")),
        );
    }
    // Built only for parts or a failure: most content is one string.
    let content_path = || at(path, "content");
    let content = match message.get("content") {
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => {
            let content_path = content_path();
            Value::Array(
                parts
                    .iter()
                    .enumerate()
                    .filter_map(|(index, part)| {
                        let part_path = at(&content_path, index);
                        let part = check.object(part, &part_path)?;
                        map_part(check, part, &part_path)
                    })
                    .collect(),
            )
        }
        _ => {
            check.fail(
                &content_path(),
                "must be a string or an array of content parts",
            );
            Value::Null
        }
    };
    json!({"role": role.unwrap_or("user"), "content": content})
}

fn anthropic_image_url(source: &Map<String, Value>) -> Option<String> {
    match source.get("type").and_then(Value::as_str)? {
        "url" => source.get("url")?.as_str().map(str::to_owned),
        "base64" => {
            let media_type = source.get("media_type")?.as_str()?;
            let data = source.get("data")?.as_str()?;
            Some(format!("data:{media_type};base64,{data}"))
        }
        _ => None,
    }
}

/// `/v1/responses`: OpenAI responses body.
fn responses(check: &mut BodyCheck, object: &Map<String, Value>) -> ChatRequest {
    let model = check.required_string(object, "model");
    let stream = check.optional_bool(object, "stream");
    let max_tokens = check.optional_count(object, "max_output_tokens");
    for key in ["temperature", "top_p"] {
        check.optional_number(object, key);
    }
    let mut mapped = Vec::new();
    if let Some(instructions) = check.optional_string(object, "instructions") {
        mapped.push(json!({"role": "system", "content": instructions}));
    }
    let path = [DetailPathSegment::from("input")];
    match object.get("input") {
        Some(Value::String(text)) => mapped.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                if let Some(message) = responses_item(check, item, &at(&path, index)) {
                    mapped.push(message);
                }
            }
        }
        Some(_) => check.fail(&path, "must be a string or an array of input items"),
        None => check.fail(&path, "is required"),
    }
    ChatRequest {
        endpoint: Endpoint::Responses,
        model,
        messages: mapped,
        stream,
        max_tokens,
        passthrough: Map::new(),
    }
}

fn responses_item(check: &mut BodyCheck, item: &Value, path: &DetailPath) -> Option<Value> {
    let item = check.object(item, path)?;
    match item.get("type").and_then(Value::as_str) {
        None | Some("message") => {}
        // Function calls, their outputs and reasoning items carry no prompt text.
        Some(_) => return None,
    }
    let roles = ["user", "assistant", "system", "developer"];
    Some(mapped_message(check, item, path, &roles, responses_part))
}

/// One responses-style content part in chat form.
fn responses_part(
    check: &mut BodyCheck,
    part: &Map<String, Value>,
    path: &DetailPath,
) -> Option<Value> {
    match check.part_type(part, path)? {
        "input_text" | "output_text" => {
            let text = check.text_field(part, "text", path);
            Some(json!({"type": "text", "text": text}))
        }
        "input_image" => {
            let url = check.text_field(part, "image_url", path);
            Some(json!({"type": "image_url", "image_url": {"url": url}}))
        }
        "input_file" => None,
        other => {
            check.fail(
                &at(path, "type"),
                format!("unknown content part type {other:?}"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(details: &[ValidationDetail]) -> Vec<Value> {
        details
            .iter()
            .map(|detail| serde_json::to_value(&detail.path).unwrap())
            .collect()
    }

    #[test]
    fn chat_reports_every_bad_field_with_its_path() {
        let body = json!({
            "model": 7,
            "messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": [{"type": "image_url"}]}],
            "stream": "yes",
            "max_tokens": 0,
        });
        let details = ChatRequest::from_json(Endpoint::Chat, body).unwrap_err();
        let paths = paths(&details);
        assert!(paths.contains(&json!(["model"])));
        assert!(paths.contains(&json!(["stream"])));
        assert!(paths.contains(&json!(["max_tokens"])));
        assert!(paths.contains(&json!(["messages", 1, "role"])));
        assert!(paths.contains(&json!(["messages", 1, "content", 0, "image_url", "url"])));
        assert_eq!(details.len(), 5);
    }

    #[test]
    fn chat_keeps_other_fields_for_the_upstream() {
        let body = json!({"model": "m/x", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2, "tools": []});
        let request = ChatRequest::from_json(Endpoint::Chat, body).unwrap();
        assert_eq!(request.passthrough.get("temperature"), Some(&json!(0.2)));
        assert!(request.passthrough.contains_key("tools"));
        assert!(!request.passthrough.contains_key("model"));
    }

    #[test]
    fn messages_maps_system_blocks_and_images() {
        let body = json!({
            "model": "anthropic/claude-sonnet-4.6",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image", "source": {"type": "url", "url": "https://img.example/cat.png"}}
            ]}]
        });
        let request = ChatRequest::from_json(Endpoint::Messages, body).unwrap();
        assert_eq!(
            request.messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(request.image_urls(), vec!["https://img.example/cat.png"]);
        assert_eq!(request.last_user_text(), "what is this");
        assert_eq!(request.max_tokens, Some(64));
    }

    #[test]
    fn vendor_schemas_report_block_paths() {
        let body = json!({"model": "a/b", "max_tokens": 5, "messages": [{"role": "system", "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "source": {"type": "url"}}
        ]}]});
        let details = ChatRequest::from_json(Endpoint::Messages, body).unwrap_err();
        assert_eq!(
            paths(&details),
            vec![
                json!(["messages", 0, "role"]),
                json!(["messages", 0, "content", 1, "source"])
            ]
        );
        let body = json!({"model": "a/b", "input": [{"role": "user", "content": [
            {"type": "input_text"}, {"type": "input_video"}
        ]}]});
        let details = ChatRequest::from_json(Endpoint::Responses, body).unwrap_err();
        assert_eq!(
            paths(&details),
            vec![
                json!(["input", 0, "content", 0, "text"]),
                json!(["input", 0, "content", 1, "type"])
            ]
        );
    }

    #[test]
    fn messages_requires_max_tokens() {
        let body = json!({"model": "a/b", "messages": [{"role": "user", "content": "hi"}]});
        let details = ChatRequest::from_json(Endpoint::Messages, body).unwrap_err();
        assert_eq!(paths(&details), vec![json!(["max_tokens"])]);
    }

    #[test]
    fn responses_maps_instructions_and_input_items() {
        let body = json!({
            "model": "openai/gpt-5-mini",
            "instructions": "be brief",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
            "max_output_tokens": 20
        });
        let request = ChatRequest::from_json(Endpoint::Responses, body).unwrap();
        assert_eq!(request.messages.len(), 2);
        assert_eq!(request.last_user_text(), "hello");
        assert_eq!(request.max_tokens, Some(20));
        assert!(request.has_conversation());
    }

    #[test]
    fn only_system_messages_is_no_conversation() {
        let body = json!({"model": "a/b", "messages": [{"role": "system", "content": "rules"}]});
        let request = ChatRequest::from_json(Endpoint::Chat, body).unwrap();
        assert!(!request.has_conversation());
    }

    #[test]
    fn non_object_body_fails_at_the_root() {
        let details = ChatRequest::from_json(Endpoint::Responses, json!([1, 2])).unwrap_err();
        assert_eq!(paths(&details), vec![json!([])]);
    }

    #[test]
    fn prompt_tokens_count_every_text_joined_by_newlines() {
        let body = json!({"model": "m/x", "messages": [
            {"role": "system", "content": "héllo"},
            {"role": "user", "content": ""},
            {"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "c"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]});
        let request = ChatRequest::from_json(Endpoint::Chat, body).unwrap();
        // "héllo\nab\nc": 10 characters (é is one), 3 tokens.
        assert_eq!(request.estimated_prompt_tokens(), 3);
        let mut joined = String::new();
        for message in &request.messages {
            push_text(&mut joined, message.get("content"));
        }
        assert_eq!(joined, "héllo\nab\nc");
        let one = json!({"model": "m/x", "messages": [{"role": "user", "content": "abcd"}]});
        let one = ChatRequest::from_json(Endpoint::Chat, one).unwrap();
        assert_eq!(one.estimated_prompt_tokens(), 1);
    }
}
