//! The one rejection of every extractor that reads a value a layer put in the
//! request extensions (axum-core's `__define_rejection!` is the model: one
//! type, one message, one status).
//!
//! A missing value is never the client's fault: the layer that provides it is
//! not in front of the route. It answers 500 in the route's envelope and
//! names the type and the layer, so the wiring fault is found from the body.

use std::fmt;

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use super::{DataApiError, EnvelopeStyle, ErrorCode, GatewayError};

/// An extractor found no value of its type in the request extensions.
///
/// ```
/// use walletgate::envelope::MissingExtension;
///
/// struct Session;
/// let missing = MissingExtension::data_api::<Session>("SessionLayer");
/// assert_eq!(
///     missing.to_string(),
///     "Session is missing from the request extensions: is SessionLayer in front of this route?"
/// );
/// assert_eq!(missing.into_response().status(), 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct MissingExtension {
    type_name: &'static str,
    layer: &'static str,
    envelope: Envelope,
}

/// Which family of envelopes the route answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Envelope {
    DataApi,
    Gateway(EnvelopeStyle),
}

impl MissingExtension {
    /// `T`, which `layer` provides, is missing on a data API (Area A) route.
    pub fn data_api<T: ?Sized>(layer: &'static str) -> Self {
        Self {
            type_name: short_type_name::<T>(),
            layer,
            envelope: Envelope::DataApi,
        }
    }

    /// `T`, which `layer` provides, is missing on a gateway (Area B) route:
    /// answered in the [`EnvelopeStyle`] the router set on the request
    /// (chat-style when it set none; the path is never guessed from).
    pub fn gateway<T: ?Sized>(layer: &'static str, parts: &Parts) -> Self {
        let style = parts
            .extensions
            .get::<EnvelopeStyle>()
            .copied()
            .unwrap_or_default();
        Self {
            type_name: short_type_name::<T>(),
            layer,
            envelope: Envelope::Gateway(style),
        }
    }

    /// `T`, which `layer` provides, is missing on a gateway (Area B) route
    /// whose envelope the caller knows: answered in `style` (a step that
    /// serves one endpoint, or a route that sets no [`EnvelopeStyle`]).
    pub fn gateway_in_style<T: ?Sized>(layer: &'static str, style: EnvelopeStyle) -> Self {
        Self {
            type_name: short_type_name::<T>(),
            layer,
            envelope: Envelope::Gateway(style),
        }
    }

    /// The missing type's name, without its module path.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The layer that should have provided it.
    pub fn layer(&self) -> &'static str {
        self.layer
    }

    /// 500 in the route's envelope, the message naming type and layer.
    pub fn into_response(self) -> Response<Bytes> {
        match self.envelope {
            Envelope::DataApi => DataApiError::from(self).into_response(),
            Envelope::Gateway(style) => GatewayError::from(self).into_response(style),
        }
    }
}

fn short_type_name<T: ?Sized>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

impl fmt::Display for MissingExtension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is missing from the request extensions: is {} in front of this route?",
            self.type_name, self.layer
        )
    }
}

impl std::error::Error for MissingExtension {}

impl From<MissingExtension> for DataApiError {
    fn from(missing: MissingExtension) -> Self {
        DataApiError::internal(missing.to_string())
    }
}

impl From<MissingExtension> for GatewayError {
    fn from(missing: MissingExtension) -> Self {
        GatewayError::new(ErrorCode::InternalError).with_message(missing.to_string())
    }
}

impl axum_core::response::IntoResponse for MissingExtension {
    fn into_response(self) -> axum_core::response::Response {
        MissingExtension::into_response(self).map(axum_core::body::Body::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe;

    fn body(response: Response<Bytes>) -> serde_json::Value {
        serde_json::from_slice(response.body()).unwrap()
    }

    #[test]
    fn data_api_route_gets_a_500_in_the_area_a_envelope() {
        let response = MissingExtension::data_api::<Probe>("ProbeLayer").into_response();
        assert_eq!(response.status(), 500);
        let body = body(response);
        assert_eq!(body["error"]["status"], 500);
        assert_eq!(
            body["error"]["message"],
            "Probe is missing from the request extensions: is ProbeLayer in front of this route?"
        );
    }

    #[test]
    fn gateway_route_gets_a_500_in_its_own_style() {
        let mut request = http::Request::new(());
        request.extensions_mut().insert(EnvelopeStyle::Messages);
        let (parts, ()) = request.into_parts();
        let missing = MissingExtension::gateway::<Probe>("ProbeLayer", &parts);
        assert_eq!(missing.type_name(), "Probe");
        assert_eq!(missing.layer(), "ProbeLayer");
        let response = missing.into_response();
        assert_eq!(response.status(), 500);
        let body = body(response);
        assert_eq!(body["type"], "error", "message-style body: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("ProbeLayer")
        );
    }

    #[test]
    fn gateway_route_with_a_known_style_gets_a_500_in_it() {
        let missing =
            MissingExtension::gateway_in_style::<Probe>("ProbeStep", EnvelopeStyle::Responses);
        let body = body(missing.into_response());
        assert_eq!(
            body["error"]["code"], "INTERNAL_ERROR",
            "responses-style body: {body}"
        );
        assert!(
            body.get("message").is_none(),
            "not the chat-style body: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Probe is missing from the request extensions: is ProbeStep")
        );
    }

    #[test]
    fn gateway_style_defaults_to_chat() {
        let (parts, ()) = http::Request::new(()).into_parts();
        let body = body(MissingExtension::gateway::<Probe>("ProbeLayer", &parts).into_response());
        assert_eq!(
            body["error"]["code"], "INTERNAL_ERROR",
            "chat-style body: {body}"
        );
    }
}
