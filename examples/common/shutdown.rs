//! Shutdown that drains, shared by the reference servers.
//!
//! On the first SIGTERM or SIGINT: readiness turns false at once (`/readyz`
//! 503, so a load balancer stops sending), the listener is closed (new
//! connections are refused), idle keep-alive connections are closed and busy
//! ones answer their request with `Connection: close` (hyper's graceful
//! shutdown), and every request in flight, a paid stream included, runs to
//! its end and its settlement. The process exits 0 once every connection is
//! done, or 1 when the drain deadline (`*_DRAIN_SECS`, default 30) cut some.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// How long a drain may take unless configured.
pub(crate) const DEFAULT_DRAIN_SECS: u64 = 30;

/// Whether the server is draining; shared by `/readyz` and the signal task.
#[derive(Clone, Debug, Default)]
pub(crate) struct Draining(Arc<AtomicBool>);

impl Draining {
    pub(crate) fn is_draining(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn start(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A signal seen (or not yet), for every clone.
#[derive(Clone, Debug)]
pub(crate) struct Signalled(watch::Receiver<bool>);

impl Signalled {
    /// Resolves once a signal arrived.
    pub(crate) async fn wait(mut self) {
        // A closed channel means the signal task is gone: nothing will come.
        if self.0.wait_for(|seen| *seen).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Listens for SIGTERM and SIGINT: on the first, marks `draining`, runs
/// `then` (closing what would never end by itself, such as open SSE
/// streams) and wakes every [`Signalled`].
pub(crate) fn on_signal(
    draining: Draining,
    then: impl FnOnce() + Send + 'static,
) -> std::io::Result<Signalled> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
        draining.start();
        then();
        let _ = sender.send(true);
        // The channel must outlive every receiver's wait.
        std::future::pending::<()>().await;
    });
    Ok(Signalled(receiver))
}

/// Runs `server` (serving with graceful shutdown on `signalled`) until it
/// stops: Ok when it drained within `deadline` after the signal, Err (exit 1)
/// when the deadline cut requests still in flight, or the server failed.
pub(crate) async fn until_drained(
    name: &str,
    server: impl Future<Output = std::io::Result<()>> + Send + 'static,
    signalled: Signalled,
    deadline: Duration,
) -> Result<(), String> {
    let mut server = tokio::spawn(server);
    tokio::select! {
        finished = &mut server => {
            return finished
                .map_err(|error| error.to_string())?
                .map_err(|error| error.to_string());
        }
        () = signalled.wait() => {}
    }
    eprintln!(
        "{name}: signal received: not ready, no new connections, draining requests in flight \
         (up to {} s)",
        deadline.as_secs()
    );
    match tokio::time::timeout(deadline, server).await {
        Ok(finished) => {
            finished
                .map_err(|error| error.to_string())?
                .map_err(|error| error.to_string())?;
            eprintln!("{name}: drained; exiting");
            Ok(())
        }
        Err(_) => Err(format!(
            "the drain deadline ({} s) cut requests still in flight",
            deadline.as_secs()
        )),
    }
}

/// A drain deadline from `variable` (seconds), else the default.
pub(crate) fn drain_secs(value: Option<String>, variable: &str) -> Result<Duration, String> {
    match value {
        None => Ok(Duration::from_secs(DEFAULT_DRAIN_SECS)),
        Some(secs) => secs
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("expected a number of seconds ({variable})")),
    }
}
