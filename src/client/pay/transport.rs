//! One request through the inner service and a capped read of an error
//! body: what the payment layer, failover and image jobs send with. Its own
//! file so that failover and jobs, which the layer uses, need not import the
//! layer back.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use tower_service::Service;

use super::error::{BoxError, ClientError};

/// The error body the client reads to classify an error answer: 64 KiB.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// One request through a clone of the inner service.
pub(crate) async fn send<S, ResBody>(
    mut inner: S,
    request: Request<Full<Bytes>>,
) -> Result<Response<ResBody>, ClientError>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    std::future::poll_fn(|cx| inner.poll_ready(cx))
        .await
        .map_err(|error| ClientError::Transport(error.into()))?;
    inner
        .call(request)
        .await
        .map_err(|error| ClientError::Transport(error.into()))
}

/// An error body, at most [`MAX_ERROR_BODY_BYTES`] (the rest is dropped).
pub(crate) async fn read_capped<ResBody>(body: ResBody) -> Result<Bytes, ClientError>
where
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    match Limited::new(body, MAX_ERROR_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Ok(Bytes::new()),
        Err(error) => Err(ClientError::Transport(error)),
    }
}
