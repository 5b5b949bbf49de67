//! The example servers' logs: `tracing` events (walletgate's layer decisions,
//! settlements, access lines) formatted by `tracing-subscriber`.
//!
//! `RUST_LOG` filters (default `info`, which shows settlements and refusals);
//! `LOG_FORMAT=json` writes one JSON object per line instead of text.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// A subscriber writing to `file`, else to standard error.
pub(crate) fn dispatch(file: Option<&Path>) -> std::io::Result<Dispatch> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let writer = match file {
        Some(path) => BoxMakeWriter::new(Mutex::new(File::create(path)?)),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false);
    Ok(if json {
        // The decision's span once, not again as the list of spans.
        Dispatch::new(builder.json().with_span_list(false).finish())
    } else {
        Dispatch::new(builder.finish())
    })
}

/// Installs [`dispatch`] as the process's subscriber.
pub(crate) fn init(file: Option<&Path>) -> Result<(), Box<dyn std::error::Error>> {
    tracing::dispatcher::set_global_default(dispatch(file)?)?;
    Ok(())
}
