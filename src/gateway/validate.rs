//! [`BodyCheck`]: the validation-detail builder behind `INVALID_REQUEST_BODY`.
//!
//! A validator walks a parsed JSON body by hand and reports every failure at
//! once, each with the exact path of the offending field
//! (`details[].path`, e.g. `["messages", 1, "role"]`), instead of the first.
//!
//! ```
//! use serde_json::json;
//! use walletgate::envelope::{DetailPathSegment, ErrorCode};
//! use walletgate::gateway::{BodyCheck, at};
//!
//! let body = json!({"model": 7, "messages": [{"role": "robot"}]});
//! let object = body.as_object().unwrap();
//! let mut check = BodyCheck::default();
//! let model = check.required_string(object, "model");
//! let root = [DetailPathSegment::from("messages")];
//! for (index, message) in check.array(object.get("messages"), &root).iter().enumerate() {
//!     if let Some(message) = check.object(message, &at(&root, index)) {
//!         check.text_field(message, "role", &at(&root, index));
//!         check.text_field(message, "content", &at(&root, index));
//!     }
//! }
//! let error = check.finish(model).unwrap_err();
//! assert_eq!(error.code(), ErrorCode::InvalidRequestBody);
//! let body = error.chat_body();
//! let paths: Vec<_> = body.details.unwrap().into_iter().map(|d| d.path).collect();
//! assert_eq!(serde_json::to_value(paths).unwrap(), json!([["model"], ["messages", 0, "content"]]));
//! ```

use serde_json::{Map, Value};

use crate::envelope::{DetailPathSegment, ErrorCode, GatewayError, ValidationDetail};

/// A path into the body, root first.
pub type DetailPath = [DetailPathSegment];

/// `INVALID_REQUEST_BODY` listing `details`: the one rejection of a body
/// that parsed but does not fit its schema.
pub fn invalid_request_body(details: impl IntoIterator<Item = ValidationDetail>) -> GatewayError {
    GatewayError::new(ErrorCode::InvalidRequestBody).with_details(details)
}

/// `path` one step deeper.
pub fn at(path: &DetailPath, segment: impl Into<DetailPathSegment>) -> Vec<DetailPathSegment> {
    let mut longer = path.to_vec();
    longer.push(segment.into());
    longer
}

/// Collects validation failures with their paths.
///
/// The field readers record a failure and return an empty or `None` value,
/// so a validator reads on and reports every bad field.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct BodyCheck {
    details: Vec<ValidationDetail>,
}

impl BodyCheck {
    /// Records a failure at `path`.
    pub fn fail(&mut self, path: &DetailPath, message: impl Into<String>) {
        self.details
            .push(ValidationDetail::new(path.to_vec(), message));
    }

    /// Whether nothing failed so far.
    pub fn is_ok(&self) -> bool {
        self.details.is_empty()
    }

    /// The failures recorded, in order.
    pub fn into_details(self) -> Vec<ValidationDetail> {
        self.details
    }

    /// `value` when nothing failed, else `INVALID_REQUEST_BODY` with every
    /// failure in `details`.
    // The error is built once and rendered straight away; boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    pub fn finish<T>(self, value: T) -> Result<T, GatewayError> {
        if self.details.is_empty() {
            Ok(value)
        } else {
            Err(invalid_request_body(self.details))
        }
    }

    /// A required non-empty string field.
    pub fn required_string(&mut self, object: &Map<String, Value>, key: &str) -> String {
        match object.get(key) {
            Some(Value::String(text)) if !text.is_empty() => text.clone(),
            Some(Value::String(_)) => {
                self.fail(&at(&[], key), "must not be empty");
                String::new()
            }
            Some(_) => {
                self.fail(&at(&[], key), "must be a string");
                String::new()
            }
            None => {
                self.fail(&at(&[], key), "is required");
                String::new()
            }
        }
    }

    /// An optional string field (`null` is absent).
    pub fn optional_string(&mut self, object: &Map<String, Value>, key: &str) -> Option<String> {
        match object.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(_) => {
                self.fail(&at(&[], key), "must be a string");
                None
            }
        }
    }

    /// An optional boolean field, `false` when absent.
    pub fn optional_bool(&mut self, object: &Map<String, Value>, key: &str) -> bool {
        match object.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => {
                self.fail(&at(&[], key), "must be a boolean");
                false
            }
        }
    }

    /// An optional positive integer field.
    pub fn optional_count(&mut self, object: &Map<String, Value>, key: &str) -> Option<u64> {
        match object.get(key) {
            None | Some(Value::Null) => None,
            Some(value) => match value.as_u64() {
                Some(count) if count >= 1 => Some(count),
                _ => {
                    self.fail(&at(&[], key), "must be a positive integer");
                    None
                }
            },
        }
    }

    /// An optional number field, checked only.
    pub fn optional_number(&mut self, object: &Map<String, Value>, key: &str) {
        if let Some(value) = object.get(key)
            && !value.is_null()
            && !value.is_number()
        {
            self.fail(&at(&[], key), "must be a number");
        }
    }

    /// A required array at `path`; empty after a failure.
    pub fn array<'v>(&mut self, value: Option<&'v Value>, path: &DetailPath) -> &'v [Value] {
        match value {
            Some(Value::Array(items)) => items,
            Some(_) => {
                self.fail(path, "must be an array");
                &[]
            }
            None => {
                self.fail(path, "is required");
                &[]
            }
        }
    }

    /// An object at `path`; `None` after a failure.
    pub fn object<'v>(
        &mut self,
        value: &'v Value,
        path: &DetailPath,
    ) -> Option<&'v Map<String, Value>> {
        let object = value.as_object();
        if object.is_none() {
            self.fail(path, "must be an object");
        }
        object
    }

    /// The `type` string of a part or block at `path`; `None` after a failure.
    pub fn part_type<'v>(
        &mut self,
        part: &'v Map<String, Value>,
        path: &DetailPath,
    ) -> Option<&'v str> {
        let kind = part.get("type").and_then(Value::as_str);
        if kind.is_none() {
            self.fail(&at(path, "type"), "must be a string");
        }
        kind
    }

    /// A required string field `key` of the object at `path`.
    pub fn text_field(
        &mut self,
        part: &Map<String, Value>,
        key: &str,
        path: &DetailPath,
    ) -> String {
        match part.get(key).and_then(Value::as_str) {
            Some(text) => text.to_owned(),
            None => {
                self.fail(&at(path, key), "must be a string");
                String::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(check: BodyCheck) -> Value {
        let paths: Vec<_> = check
            .into_details()
            .into_iter()
            .map(|detail| detail.path)
            .collect();
        serde_json::to_value(paths).unwrap()
    }

    #[test]
    fn every_reader_reports_its_own_path() {
        let body = json!({"s": "", "b": 1, "c": 0, "n": "x", "a": {}, "o": [1]});
        let object = body.as_object().unwrap();
        let mut check = BodyCheck::default();
        assert_eq!(check.required_string(object, "s"), "");
        assert_eq!(check.required_string(object, "missing"), "");
        assert!(!check.optional_bool(object, "b"));
        assert_eq!(check.optional_count(object, "c"), None);
        check.optional_number(object, "n");
        assert!(
            check
                .array(object.get("a"), &[DetailPathSegment::from("a")])
                .is_empty()
        );
        let item = &object["o"][0];
        assert!(
            check
                .object(item, &at(&[DetailPathSegment::from("o")], 0))
                .is_none()
        );
        assert_eq!(
            paths(check),
            json!([["s"], ["missing"], ["b"], ["c"], ["n"], ["a"], ["o", 0]])
        );
    }

    #[test]
    fn a_clean_body_finishes_with_its_value() {
        let body = json!({"model": "m", "stream": true, "max_tokens": 3});
        let object = body.as_object().unwrap();
        let mut check = BodyCheck::default();
        let model = check.required_string(object, "model");
        assert!(check.optional_bool(object, "stream"));
        assert_eq!(check.optional_count(object, "max_tokens"), Some(3));
        assert!(check.is_ok());
        assert_eq!(check.finish(model).unwrap(), "m");
    }
}
