//! The `bazaar` discovery extension of an HTTP route (x402 v2,
//! `specs/extensions/bazaar.md`): what to send and what comes back, with a
//! JSON Schema (draft 2020-12) its `info` validates against. A server builds
//! one per route and declares it through
//! [`with_quote_extensions`](super::X402LayerBuilder::with_quote_extensions).

use http::Method;
use serde_json::{Map, Value, json};

/// The extension's key in `PaymentRequired.extensions`.
pub const BAZAAR: &str = "bazaar";

/// The JSON Schema dialect of the extension's `schema`.
pub const JSON_SCHEMA_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// An HTTP route's discovery info: method, input and output.
///
/// Body methods (`POST`, `PUT`, `PATCH`) carry a JSON body and its schema;
/// the others may carry path parameters (a dynamic route then names its
/// `routeTemplate`, `/jobs/:id`).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct BazaarRoute {
    method: Method,
    body: Option<(Value, Value)>,
    path_params: Option<(Map<String, Value>, String)>,
    output: Option<(Value, Option<Value>)>,
}

impl BazaarRoute {
    /// A route answering `method` (the actual verb of the request).
    pub fn new(method: Method) -> Self {
        Self {
            method,
            body: None,
            path_params: None,
            output: None,
        }
    }

    /// A JSON body: an `example` and the `schema` every body follows.
    pub fn with_json_body(mut self, example: Value, schema: Value) -> Self {
        self.body = Some((example, schema));
        self
    }

    /// The path parameters of one request (`{"id": "job_1"}`) and the route's
    /// template (`/jobs/:id`).
    pub fn with_path_params(
        mut self,
        params: Map<String, Value>,
        template: impl Into<String>,
    ) -> Self {
        self.path_params = Some((params, template.into()));
        self
    }

    /// A JSON answer: an `example` and, if given, the schema it follows.
    pub fn with_json_output(mut self, example: Value, schema: Option<Value>) -> Self {
        self.output = Some((example, schema));
        self
    }

    /// `{"bazaar": {"info": …, "schema": …}}`, plus `routeTemplate` for a
    /// dynamic route: ready for `PaymentRequired.extensions`.
    pub fn to_extensions(&self) -> Map<String, Value> {
        let mut input = Map::new();
        let mut input_schema = Map::new();
        let mut required = vec![json!("type"), json!("method")];
        input.insert("type".into(), json!("http"));
        input.insert("method".into(), json!(self.method.as_str()));
        input_schema.insert("type".into(), json!({"type": "string", "const": "http"}));
        input_schema.insert(
            "method".into(),
            json!({"type": "string", "enum": [self.method.as_str()]}),
        );
        if let Some((example, schema)) = &self.body {
            input.insert("bodyType".into(), json!("json"));
            input.insert("body".into(), example.clone());
            input_schema.insert(
                "bodyType".into(),
                json!({"type": "string", "enum": ["json"]}),
            );
            input_schema.insert("body".into(), schema.clone());
            required.extend([json!("bodyType"), json!("body")]);
        }
        if let Some((params, _)) = &self.path_params {
            input.insert("pathParams".into(), Value::Object(params.clone()));
            let properties: Map<String, Value> = params
                .keys()
                .map(|name| (name.clone(), json!({"type": "string"})))
                .collect();
            input_schema.insert(
                "pathParams".into(),
                json!({"type": "object", "properties": properties}),
            );
        }
        let mut info = Map::new();
        info.insert("input".into(), Value::Object(input));
        let mut output_schema = json!({"type": "object", "required": ["type"]});
        if let Some((example, schema)) = &self.output {
            info.insert("output".into(), json!({"type": "json", "example": example}));
            output_schema["properties"] = json!({"type": {"type": "string", "const": "json"}});
            if let Some(schema) = schema {
                output_schema["properties"]["example"] = schema.clone();
            }
        }
        let input_schema = json!({
            "type": "object",
            "required": required,
            "additionalProperties": false,
            "properties": input_schema,
        });
        let schema = info_schema(input_schema, Some(output_schema));
        let mut bazaar = Map::new();
        bazaar.insert("info".into(), Value::Object(info));
        bazaar.insert("schema".into(), schema);
        if let Some((_, template)) = &self.path_params {
            bazaar.insert("routeTemplate".into(), json!(template));
        }
        let mut extensions = Map::new();
        extensions.insert(BAZAAR.into(), Value::Object(bazaar));
        extensions
    }
}

/// An MCP tool's discovery info (`info.input.type` `"mcp"`): its name, the
/// JSON Schema of its arguments, and optionally a description and an
/// example. Catalogued under (`resource.url`, `toolName`): the tool's
/// PaymentRequired names `mcp://tool/<name>`. `toolName` is what the npm
/// 2.27 helpers write (the specification's text says `tool`).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct BazaarTool {
    name: String,
    input_schema: Value,
    description: Option<String>,
    example: Option<Value>,
}

impl BazaarTool {
    /// The tool `name`, its arguments following `input_schema`.
    pub fn new(name: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            input_schema,
            description: None,
            example: None,
        }
    }

    /// What the tool does.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Example arguments.
    pub fn with_example(mut self, arguments: Value) -> Self {
        self.example = Some(arguments);
        self
    }

    /// `{"bazaar": {"info": {"input": {"type": "mcp", …}}, "schema": …}}`,
    /// ready for `PaymentRequired.extensions`; served over streamable HTTP.
    pub fn to_extensions(&self) -> Map<String, Value> {
        let mut input = Map::new();
        input.insert("type".into(), json!("mcp"));
        input.insert("toolName".into(), json!(self.name));
        input.insert("inputSchema".into(), self.input_schema.clone());
        input.insert("transport".into(), json!("streamable-http"));
        if let Some(description) = &self.description {
            input.insert("description".into(), json!(description));
        }
        if let Some(example) = &self.example {
            input.insert("example".into(), example.clone());
        }
        let input_schema = json!({
            "type": "object",
            "required": ["type", "toolName", "inputSchema"],
            "properties": {
                "type": {"type": "string", "const": "mcp"},
                "toolName": {"type": "string", "const": self.name},
                "inputSchema": {"type": "object"},
                "description": {"type": "string"},
                "transport": {"type": "string", "enum": ["streamable-http", "sse"]},
                "example": {"type": "object"},
            },
        });
        let schema = info_schema(input_schema, None);
        let mut bazaar = Map::new();
        bazaar.insert(
            BAZAAR.into(),
            json!({"info": {"input": Value::Object(input)}, "schema": schema}),
        );
        bazaar
    }
}

/// The schema an extension's `info` validates against: its `input` (and
/// `output`) as described.
fn info_schema(input: Value, output: Option<Value>) -> Value {
    let mut properties = Map::new();
    properties.insert("input".into(), input);
    if let Some(output) = output {
        properties.insert("output".into(), output);
    }
    json!({
        "$schema": JSON_SCHEMA_2020_12,
        "type": "object",
        "required": ["input"],
        "properties": properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_route_declares_its_body_and_narrows_the_method() {
        let extensions = BazaarRoute::new(Method::POST)
            .with_json_body(
                json!({"q": "hi"}),
                json!({"type": "object", "required": ["q"]}),
            )
            .with_json_output(json!({"a": 1}), None)
            .to_extensions();
        let bazaar = &extensions[BAZAAR];
        assert_eq!(
            bazaar["info"]["input"],
            json!({"type": "http", "method": "POST", "bodyType": "json", "body": {"q": "hi"}})
        );
        assert_eq!(
            bazaar["info"]["output"],
            json!({"type": "json", "example": {"a": 1}})
        );
        let input = &bazaar["schema"]["properties"]["input"];
        assert_eq!(input["properties"]["method"]["enum"], json!(["POST"]));
        assert_eq!(
            input["required"],
            json!(["type", "method", "bodyType", "body"])
        );
        assert_eq!(bazaar["schema"]["$schema"], JSON_SCHEMA_2020_12);
        assert!(bazaar.get("routeTemplate").is_none());
    }

    #[test]
    fn a_dynamic_route_names_its_template_and_parameters() {
        let mut params = Map::new();
        params.insert("id".into(), json!("job_1"));
        let extensions = BazaarRoute::new(Method::GET)
            .with_path_params(params, "/jobs/:id")
            .to_extensions();
        let bazaar = &extensions[BAZAAR];
        assert_eq!(bazaar["routeTemplate"], "/jobs/:id");
        assert_eq!(
            bazaar["info"]["input"]["pathParams"],
            json!({"id": "job_1"})
        );
        assert!(bazaar["info"]["input"].get("body").is_none());
    }

    #[test]
    fn a_tool_is_described_as_mcp_by_its_tool_name() {
        let schema = json!({"type": "object", "properties": {"model": {"type": "string"}}});
        let extensions = BazaarTool::new("chat", schema.clone())
            .with_description("Chat")
            .with_example(json!({"model": "m"}))
            .to_extensions();
        let input = &extensions[BAZAAR]["info"]["input"];
        assert_eq!(input["type"], "mcp");
        assert_eq!(input["toolName"], "chat");
        assert_eq!(input["inputSchema"], schema);
        assert_eq!(input["transport"], "streamable-http");
        assert_eq!(input["example"]["model"], "m");
        let declared = &extensions[BAZAAR]["schema"]["properties"]["input"];
        assert_eq!(declared["properties"]["toolName"]["const"], "chat");
    }
}
