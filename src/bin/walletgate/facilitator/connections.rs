//! How `walletgate facilitator` holds its connections, so that none can be
//! tied up before authentication (issue 40):
//!
//! * a request's headers must arrive within the header timeout, counted from
//!   the connection's start or the previous answer (hyper's
//!   `header_read_timeout`: it also closes a keep-alive connection left idle);
//! * a connection on which nothing moves for the idle timeout while no
//!   request is being worked on (an answer the client does not read) is
//!   closed, and so is one whose request body has not arrived whole within it
//!   (a body trickled a byte at a time);
//! * at most `max_connections` are served at once: the next ones wait in the
//!   listen queue, unaccepted, so they hold no file descriptor of ours;
//! * an accept error (out of file descriptors) is retried after a growing
//!   pause, never at once in a loop.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The first pause after an accept error; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(10);

/// The longest pause between accept attempts after errors.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What bounds a connection (`--header-timeout-secs`, `--idle-timeout-secs`,
/// `--max-connections`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) header_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) max_connections: usize,
}

/// Serves `listener` with `handle` until `shutdown` completes.
pub(super) async fn serve<H, F>(
    listener: TcpListener,
    limits: Limits,
    handle: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Timed<Incoming>>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut backoff = MIN_BACKOFF;
    tokio::pin!(shutdown);
    loop {
        // A slot first: at the cap nothing is accepted, so waiting
        // connections cost the kernel's queue, not our descriptors.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit,
            () = &mut shutdown => return,
        };
        let Ok(permit) = permit else { return };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return,
        };
        match accepted {
            Ok((stream, _)) => {
                backoff = MIN_BACKOFF;
                tokio::spawn(connection(stream, limits, handle.clone(), permit));
            }
            Err(error) => {
                // EMFILE and the like fail again at once: retrying without a
                // pause spins a core and starves the connections we have.
                tracing::warn!(
                    error = %error,
                    retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                    "accept failed"
                );
                drop(permit);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = &mut shutdown => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One connection, until it ends or one of its limits closes it.
async fn connection<H, F>(
    stream: TcpStream,
    limits: Limits,
    handle: H,
    _permit: OwnedSemaphorePermit,
) where
    H: Fn(Request<Timed<Incoming>>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let activity = Arc::new(Activity::new(Instant::now()));
    let io = TokioIo::new(Watched {
        stream,
        activity: Arc::clone(&activity),
    });
    let service = hyper::service::service_fn({
        let activity = Arc::clone(&activity);
        move |request: Request<Incoming>| {
            let working = Working::start(&activity, request.body().is_end_stream());
            let request = request.map(|body| Timed {
                body,
                activity: Arc::clone(&activity),
            });
            let answer = handle(request);
            async move {
                let response = answer.await;
                drop(working);
                Ok::<_, Infallible>(response)
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let served = builder.serve_connection(io, service);
    tokio::pin!(served);
    loop {
        let check = match activity.next_check(Instant::now(), limits.idle_timeout) {
            Some(at) => at,
            None => {
                // Dropping the connection closes the socket (and drops a
                // handler still waiting for its body: nothing was consumed).
                tracing::debug!("connection closed: idle, or its body too slow");
                return;
            }
        };
        tokio::select! {
            result = served.as_mut() => {
                if let Err(error) = result {
                    // hyper's errors name no header or body.
                    tracing::debug!(error = %error, "connection ended");
                }
                return;
            }
            () = tokio::time::sleep_until(check) => {}
        }
    }
}

/// What the idle rules read: when a byte last moved, how many requests are
/// being worked on, and since when a body has been awaited.
#[derive(Debug)]
struct Activity {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    last_io: Instant,
    working: usize,
    body_since: Option<Instant>,
}

impl Activity {
    fn new(now: Instant) -> Self {
        Self {
            state: Mutex::new(State {
                last_io: now,
                working: 0,
                body_since: None,
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn moved(&self) {
        self.with(|state| state.last_io = Instant::now());
    }

    fn body_done(&self) {
        self.with(|state| state.body_since = None);
    }

    /// When to look again, or `None` when the connection must close now: a
    /// body awaited for `idle` or longer, or, with no request being worked
    /// on, no byte moved for `idle`. A handler at work (a settlement awaiting
    /// its receipt) is bounded by the settler's own timeouts, not this one.
    fn next_check(&self, now: Instant, idle: Duration) -> Option<Instant> {
        self.with(|state| {
            let body = state.body_since.map(|since| since + idle);
            let quiet = (state.working == 0).then(|| state.last_io + idle);
            let deadline = match (body, quiet) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                // Nothing to time: look again in a while.
                (None, None) => return Some(now + idle),
            };
            (deadline > now).then_some(deadline)
        })
    }
}

/// A request being worked on, from its head to its answer.
struct Working(Arc<Activity>);

impl Working {
    fn start(activity: &Arc<Activity>, bodiless: bool) -> Self {
        activity.with(|state| {
            let now = Instant::now();
            state.working += 1;
            state.last_io = now;
            state.body_since = (!bodiless).then_some(now);
        });
        Self(Arc::clone(activity))
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.0.with(|state| {
            state.working = state.working.saturating_sub(1);
            state.body_since = None;
            // The answer is written from now: its time starts here, however
            // long the work took.
            state.last_io = Instant::now();
        });
    }
}

/// The socket, noting each byte that moves.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.moved();
        }
        poll
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.moved();
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.moved();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

pin_project! {
    /// A request body that tells its connection when it has arrived whole.
    pub(super) struct Timed<B> {
        #[pin]
        body: B,
        activity: Arc<Activity>,
    }
}

impl<B: Body> Body for Timed<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let poll = this.body.poll_frame(cx);
        if matches!(poll, Poll::Ready(None | Some(Err(_)))) {
            this.activity.body_done();
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(60);

    #[test]
    fn a_quiet_connection_closes_after_the_idle_timeout() {
        let start = Instant::now();
        let activity = Activity::new(start);
        assert_eq!(activity.next_check(start, IDLE), Some(start + IDLE));
        assert_eq!(activity.next_check(start + IDLE, IDLE), None);
    }

    #[test]
    fn a_handler_at_work_is_not_idle_but_an_awaited_body_is_timed() {
        let start = Instant::now();
        let activity = Arc::new(Activity::new(start));
        let working = Working::start(&activity, false);
        let began = activity.with(|state| state.last_io);
        // The body has `IDLE` to arrive, whatever moves meanwhile.
        assert_eq!(activity.next_check(began, IDLE), Some(began + IDLE));
        activity.moved();
        assert_eq!(activity.next_check(began + IDLE, IDLE), None);
        // Once it is in, the work is not timed however quiet the socket.
        activity.body_done();
        let later = began + IDLE * 5;
        assert_eq!(activity.next_check(later, IDLE), Some(later + IDLE));
        // The answer's time starts when the work ends.
        drop(working);
        let ended = activity.with(|state| state.last_io);
        assert!(ended >= began);
        assert_eq!(activity.next_check(ended, IDLE), Some(ended + IDLE));
    }

    #[test]
    fn a_bodiless_request_awaits_no_body() {
        let start = Instant::now();
        let activity = Arc::new(Activity::new(start));
        let _working = Working::start(&activity, true);
        assert_eq!(activity.with(|state| state.body_since), None);
        let now = start + IDLE * 3;
        assert_eq!(activity.next_check(now, IDLE), Some(now + IDLE));
    }
}
