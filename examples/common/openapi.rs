//! OpenAPI 3.1 pieces both example servers render their route tables with:
//! the document's frame, parameters, response objects, schema references,
//! and the handler that serves the bytes serialised at start.

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, header};
use serde_json::{Map, Value, json};

/// `{"$ref": "#/components/schemas/<name>"}`.
pub(crate) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// A required path parameter.
pub(crate) fn path_parameter(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": schema })
}

/// An optional query parameter.
#[allow(dead_code)] // the data API's routes take query parameters, the gateway's do not
pub(crate) fn query_parameter(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description, "schema": schema })
}

/// A required query parameter.
#[allow(dead_code)] // the data API's routes take query parameters, the gateway's do not
pub(crate) fn required_query_parameter(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": true, "description": description, "schema": schema })
}

/// A response object whose body is JSON of `schema`, or that has no body.
pub(crate) fn json_response(description: &str, schema: Option<Value>) -> Value {
    match schema {
        Some(schema) => json!({
            "description": description,
            "content": { "application/json": { "schema": schema } }
        }),
        None => json!({ "description": description }),
    }
}

/// A required JSON request body of `schema`.
pub(crate) fn json_request_body(schema: Value) -> Value {
    json!({
        "required": true,
        "content": { "application/json": { "schema": schema } }
    })
}

/// The document: `info`, one server at `origin`, `tags`, `paths` and `components`.
pub(crate) fn document(
    info: Value,
    origin: &str,
    tags: Value,
    paths: Map<String, Value>,
    components: Value,
) -> Value {
    json!({
        "openapi": "3.1.0",
        "info": info,
        "servers": [{ "url": origin }],
        "tags": tags,
        "paths": paths,
        "components": components,
    })
}

/// The schema of the OpenAPI document itself (what `GET …/openapi.json` answers).
pub(crate) fn openapi_schema() -> Value {
    json!({
        "type": "object",
        "required": ["openapi", "info", "paths", "components"],
        "properties": {
            "openapi": { "type": "string", "const": "3.1.0" },
            "info": { "type": "object" },
            "servers": { "type": "array" },
            "tags": { "type": "array" },
            "paths": { "type": "object" },
            "components": { "type": "object" }
        }
    })
}

/// A JSON document serialised once at start, answered as is (a `Bytes`
/// clone is a reference count, not a copy).
pub(crate) fn json_bytes(bytes: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}
