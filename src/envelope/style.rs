//! Which envelope a route answers in, set once by the router.
//!
//! Every gateway layer renders its rejections in the route's
//! [`EnvelopeStyle`], read from the request extensions. The router puts it
//! there, once per route, with [`EnvelopeStyleLayer`]; nothing guesses it from
//! the path. A route that sets none answers chat-style.
//!
//! ```
//! use std::convert::Infallible;
//! use tower::{ServiceExt, service_fn};
//! use tower_layer::Layer;
//! use walletgate::envelope::{EnvelopeStyle, EnvelopeStyleLayer};
//!
//! # tokio_test_block_on(async {
//! let route = EnvelopeStyleLayer::new(EnvelopeStyle::Messages).layer(service_fn(
//!     |request: http::Request<()>| async move {
//!         Ok::<_, Infallible>(EnvelopeStyle::of_request(&request))
//!     },
//! ));
//! let style = route.oneshot(http::Request::new(())).await.unwrap();
//! assert_eq!(style, EnvelopeStyle::Messages);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::gateway::GatewayError;

/// Which error shape a gateway route answers with.
///
/// Set it per route with [`EnvelopeStyleLayer`] (or insert it into the
/// request extensions yourself); layers read it with
/// [`EnvelopeStyle::of_request`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EnvelopeStyle {
    /// Chat-style (`/v1/chat/completions`, images, models): the default.
    #[default]
    Chat,
    /// Message-style (`/v1/messages`).
    Messages,
    /// Responses-style (`/v1/responses`).
    Responses,
}

impl EnvelopeStyle {
    /// The style the specification gives the route at `path` (`/v1/…` or
    /// `/api/v1/…`).
    ///
    /// For a router choosing the [`EnvelopeStyleLayer`] of a path it
    /// registers; layers never call it on a request.
    pub fn for_path(path: &str) -> Self {
        let path = path.trim_end_matches('/');
        if path.ends_with("/v1/messages") {
            Self::Messages
        } else if path.ends_with("/v1/responses") {
            Self::Responses
        } else {
            Self::Chat
        }
    }

    /// The style the router set for this request; chat-style when it set none.
    pub fn of_request<B>(request: &Request<B>) -> Self {
        request
            .extensions()
            .get::<Self>()
            .copied()
            .unwrap_or_default()
    }

    /// [`of_request`](Self::of_request) for a request head.
    pub fn of_parts(parts: &Parts) -> Self {
        parts.extensions.get::<Self>().copied().unwrap_or_default()
    }
}

/// Sets the route's [`EnvelopeStyle`] in the request extensions.
#[derive(Clone, Copy, Debug, Default)]
pub struct EnvelopeStyleLayer {
    style: EnvelopeStyle,
}

impl EnvelopeStyleLayer {
    /// Routes under this layer answer in `style`.
    pub fn new(style: EnvelopeStyle) -> Self {
        Self { style }
    }
}

impl<S> Layer<S> for EnvelopeStyleLayer {
    type Service = SetEnvelopeStyle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SetEnvelopeStyle {
            inner,
            style: self.style,
        }
    }
}

/// The service of [`EnvelopeStyleLayer`].
#[derive(Clone, Copy, Debug)]
pub struct SetEnvelopeStyle<S> {
    inner: S,
    style: EnvelopeStyle,
}

impl<S> SetEnvelopeStyle<S> {
    define_inner_service_accessors!();
}

impl<S, B> Service<Request<B>> for SetEnvelopeStyle<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.style);
        self.inner.call(request)
    }
}

type RenderFn = dyn Fn(GatewayError, EnvelopeStyle) -> Response<Bytes> + Send + Sync;

/// How a layer turns its failure into a response: by default the route's
/// envelope ([`GatewayError::into_response`]); a caller who wants another
/// answer owns it, as with tower-http's `ValidateRequest`.
///
/// Layers take one with `with_rejection(..)`; it gets the failure (code,
/// message, headers to write) and the route's style.
#[derive(Clone)]
pub struct RenderRejection(Arc<RenderFn>);

impl RenderRejection {
    /// Rejections rendered by `render`.
    pub fn new<F>(render: F) -> Self
    where
        F: Fn(GatewayError, EnvelopeStyle) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self(Arc::new(render))
    }

    /// The response for `error` on a route answering in `style`.
    pub fn render(&self, error: GatewayError, style: EnvelopeStyle) -> Response<Bytes> {
        (self.0)(error, style)
    }
}

impl Default for RenderRejection {
    /// The route's envelope.
    fn default() -> Self {
        Self::new(GatewayError::into_response)
    }
}

impl fmt::Debug for RenderRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderRejection").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_without_a_style_answers_chat_style_whatever_its_path() {
        let mut request = Request::new(());
        *request.uri_mut() = "/v1/messages".parse().unwrap();
        assert_eq!(EnvelopeStyle::of_request(&request), EnvelopeStyle::Chat);
        request.extensions_mut().insert(EnvelopeStyle::Responses);
        assert_eq!(
            EnvelopeStyle::of_request(&request),
            EnvelopeStyle::Responses
        );
        let (parts, ()) = request.into_parts();
        assert_eq!(EnvelopeStyle::of_parts(&parts), EnvelopeStyle::Responses);
    }

    #[tokio::test]
    async fn the_layer_sets_the_style_for_the_inner_service() {
        use tower::{ServiceExt, service_fn};
        let service = EnvelopeStyleLayer::new(EnvelopeStyle::Messages).layer(service_fn(
            |request: Request<()>| async move {
                Ok::<_, std::convert::Infallible>(EnvelopeStyle::of_request(&request))
            },
        ));
        let style = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(style, EnvelopeStyle::Messages);
    }

    #[test]
    fn the_default_rendering_is_the_routes_envelope_and_a_caller_can_own_it() {
        use crate::envelope::ErrorCode;
        let error = || GatewayError::new(ErrorCode::InvalidJson);
        let default = RenderRejection::default().render(error(), EnvelopeStyle::Messages);
        let expected = error().into_response(EnvelopeStyle::Messages);
        assert_eq!(default.status(), expected.status());
        assert_eq!(default.body(), expected.body());
        let own =
            RenderRejection::new(|error, _style| Response::new(Bytes::from(error.code().as_str())));
        assert_eq!(
            own.render(error(), EnvelopeStyle::Chat).body(),
            "INVALID_JSON"
        );
    }
}
