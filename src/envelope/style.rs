//! Which envelope a route answers in, set once by the router.
//!
//! Every gateway layer renders its rejections in the route's
//! [`EnvelopeStyle`], read from the request extensions. The router puts it
//! there, once per route, with [`SetEnvelopeStyleLayer`]; nothing guesses it from
//! the path. A route that sets none answers chat-style.
//!
//! ```
//! use std::convert::Infallible;
//! use tower::{ServiceExt, service_fn};
//! use tower_layer::Layer;
//! use walletgate::envelope::{EnvelopeStyle, SetEnvelopeStyleLayer};
//!
//! # tokio_test_block_on(async {
//! let route = SetEnvelopeStyleLayer::new(EnvelopeStyle::Messages).layer(service_fn(
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

use std::task::{Context, Poll};

use http::Request;
use http::request::Parts;
use tower_layer::Layer;
use tower_service::Service;

/// Which error shape a gateway route answers with.
///
/// Set it per route with [`SetEnvelopeStyleLayer`] (or insert it into the
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
#[must_use]
pub struct SetEnvelopeStyleLayer {
    style: EnvelopeStyle,
}

impl SetEnvelopeStyleLayer {
    /// Routes under this layer answer in `style`.
    pub fn new(style: EnvelopeStyle) -> Self {
        Self { style }
    }
}

impl<S> Layer<S> for SetEnvelopeStyleLayer {
    type Service = SetEnvelopeStyle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SetEnvelopeStyle {
            inner,
            style: self.style,
        }
    }
}

/// The service of [`SetEnvelopeStyleLayer`].
#[derive(Clone, Copy, Debug)]
pub struct SetEnvelopeStyle<S> {
    inner: S,
    style: EnvelopeStyle,
}

impl<S> SetEnvelopeStyle<S> {
    /// Wraps `inner`; same as `SetEnvelopeStyle::layer(style).layer(inner)`.
    pub fn new(inner: S, style: EnvelopeStyle) -> Self {
        Self { inner, style }
    }

    define_inner_service_accessors!();
}

impl SetEnvelopeStyle<()> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`SetEnvelopeStyleLayer::new`].
    pub fn layer(style: EnvelopeStyle) -> SetEnvelopeStyleLayer {
        SetEnvelopeStyleLayer::new(style)
    }
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
        let service = SetEnvelopeStyleLayer::new(EnvelopeStyle::Messages).layer(service_fn(
            |request: Request<()>| async move {
                Ok::<_, std::convert::Infallible>(EnvelopeStyle::of_request(&request))
            },
        ));
        let style = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(style, EnvelopeStyle::Messages);
    }
}
