//! A server's own 402 extensions (`PaymentRequired.extensions`): discovery
//! (`bazaar`) and the like, decided per request by a hook.

use std::sync::Arc;

use http::request::Parts;
use serde_json::{Map, Value};

use super::pricing::Price;
use crate::x402::wire::types::PaymentRequired;

/// Extensions for one request's 402, shared: a server builds them once per
/// route (or model) and hands every request the same value, so a cached quote
/// is recognised by pointer before it is compared by value.
pub type QuoteExtensionMap = Arc<Map<String, Value>>;

/// Decides which extensions a request's 402 declares, merged into
/// `PaymentRequired.extensions` (set with
/// [`with_quote_extensions`](super::X402LayerBuilder::with_quote_extensions)).
///
/// It sees the request head (method, path, the earlier steps' extensions
/// such as axum's `MatchedPath`) and its price before the flat fee. Quotes
/// are cached per resource URL; a cached quote is reused only when its
/// price and these extensions are both equal, so the hook may depend on
/// anything in the request.
///
/// Closures `Fn(&Parts, &Price) -> Option<QuoteExtensionMap>` implement it.
pub trait QuoteExtensions: Send + Sync + 'static {
    /// The extensions of `request`'s 402, or `None` for none.
    fn extensions(&self, request: &Parts, price: &Price) -> Option<QuoteExtensionMap>;
}

impl<F> QuoteExtensions for F
where
    F: Fn(&Parts, &Price) -> Option<QuoteExtensionMap> + Send + Sync + 'static,
{
    fn extensions(&self, request: &Parts, price: &Price) -> Option<QuoteExtensionMap> {
        self(request, price)
    }
}

/// Adds `extensions` to `required`'s, each key replacing one of the same name.
pub(crate) fn merge_extensions(required: &mut PaymentRequired, extensions: &Map<String, Value>) {
    if extensions.is_empty() {
        return;
    }
    required
        .extensions
        .get_or_insert_with(Map::new)
        .extend(extensions.iter().map(|(k, v)| (k.clone(), v.clone())));
}

/// Whether a quote built with `built` still fits a request declaring `wanted`.
pub(crate) fn same_extensions(
    built: Option<&QuoteExtensionMap>,
    wanted: Option<&QuoteExtensionMap>,
) -> bool {
    match (built, wanted) {
        (None, None) => true,
        (Some(built), Some(wanted)) => Arc::ptr_eq(built, wanted) || built == wanted,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::x402::wire::types::ResourceInfo;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn merging_keeps_what_is_there_and_adds_the_rest() {
        let mut required = PaymentRequired {
            x402_version: 2,
            error: None,
            resource: ResourceInfo::default(),
            accepts: Vec::new(),
            extensions: Some(map(json!({"payment-identifier": {"info": {}}}))),
        };
        merge_extensions(&mut required, &map(json!({"bazaar": {"info": {}}})));
        let names: Vec<&String> = required.extensions.as_ref().unwrap().keys().collect();
        assert_eq!(names, ["bazaar", "payment-identifier"]);
        let mut bare = PaymentRequired {
            extensions: None,
            ..required
        };
        merge_extensions(&mut bare, &Map::new());
        assert!(bare.extensions.is_none());
    }

    #[test]
    fn equal_extensions_are_the_same_by_pointer_or_value() {
        let one: QuoteExtensionMap = Arc::new(map(json!({"bazaar": 1})));
        let copy: QuoteExtensionMap = Arc::new(map(json!({"bazaar": 1})));
        let other: QuoteExtensionMap = Arc::new(map(json!({"bazaar": 2})));
        assert!(same_extensions(Some(&one), Some(&one)));
        assert!(same_extensions(Some(&one), Some(&copy)));
        assert!(!same_extensions(Some(&one), Some(&other)));
        assert!(!same_extensions(Some(&one), None));
        assert!(same_extensions(None, None));
    }
}
