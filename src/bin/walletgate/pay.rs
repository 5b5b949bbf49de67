//! `walletgate pay [--method POST] URL [--data JSON | --data-file F] [--max-usd 0.10] [--header K:V]…`
//!
//! The key comes from `WALLETGATE_PRIVATE_KEY` or `--key-file` (hex, with or
//! without `0x`), never from the command line. The body goes to stdout,
//! one receipt line (payer, amount, network, transaction) to stderr.
//! Nothing printed ever holds the key, a signature or an authorization header.

use std::io::Write;
use std::path::PathBuf;

use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use clap::Args;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower_layer::Layer;
use tower_service::Service;
use walletgate::client::pay::{ClientError, Receipt, SpendPolicy, X402PaymentLayer};
use walletgate::tls::ClientTls;

use crate::exit::Exit;

/// The environment variable holding the paying key.
const KEY_VARIABLE: &str = "WALLETGATE_PRIVATE_KEY";

/// `walletgate pay`.
#[derive(Debug, Args)]
pub(crate) struct PayArgs {
    /// The full URL to call (e.g. http://127.0.0.1:8402/v1/chat/completions).
    url: String,
    /// The HTTP method.
    #[arg(long, short = 'X', default_value = "POST")]
    method: String,
    /// The JSON request body.
    #[arg(long, short = 'd', conflicts_with = "data_file")]
    data: Option<String>,
    /// A file holding the request body.
    #[arg(long)]
    data_file: Option<PathBuf>,
    /// The most one payment may cost, in USD.
    #[arg(long, default_value = "0.10")]
    max_usd: String,
    /// An extra request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// A file holding the private key (instead of WALLETGATE_PRIVATE_KEY).
    #[arg(long)]
    key_file: Option<PathBuf>,
}

/// A failure before any request: unusable input.
fn usage(message: impl std::fmt::Display) -> Exit {
    eprintln!("walletgate pay: {message}");
    Exit::Api
}

/// The paying key; errors never repeat it.
fn signer(args: &PayArgs) -> Result<PrivateKeySigner, Exit> {
    let (text, source) = match &args.key_file {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|error| {
                usage(format!(
                    "cannot read --key-file {}: {error}",
                    path.display()
                ))
            })?,
            "--key-file",
        ),
        None => (
            std::env::var(KEY_VARIABLE).map_err(|_| {
                eprintln!("walletgate pay: set {KEY_VARIABLE} or pass --key-file PATH");
                Exit::PaymentOrAuth
            })?,
            KEY_VARIABLE,
        ),
    };
    let hex = text.trim();
    let hex = hex.strip_prefix("0x").unwrap_or(hex);
    hex.parse::<PrivateKeySigner>().map_err(|_| {
        eprintln!("walletgate pay: {source} does not hold a 32-byte hex secp256k1 key");
        Exit::PaymentOrAuth
    })
}

fn request(args: &PayArgs) -> Result<Request<Full<Bytes>>, Exit> {
    let method = Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| usage(format!("not an HTTP method: {}", args.method)))?;
    let body = match (&args.data, &args.data_file) {
        (Some(data), _) => Bytes::from(data.clone()),
        (None, Some(path)) => Bytes::from(std::fs::read(path).map_err(|error| {
            usage(format!(
                "cannot read --data-file {}: {error}",
                path.display()
            ))
        })?),
        (None, None) => Bytes::new(),
    };
    let mut request = Request::builder().method(method).uri(&args.url);
    if !body.is_empty() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    let mut request = request
        .body(Full::new(body))
        .map_err(|_| usage(format!("not a URL: {}", args.url)))?;
    for header in &args.headers {
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| usage(format!("--header wants `Name: value`, got `{header}`")))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| usage(format!("not a header name: `{}`", name.trim())))?;
        // The value is not echoed: it may be a credential.
        let value = HeaderValue::from_str(value.trim())
            .map_err(|_| usage(format!("the value of header `{name}` is not valid")))?;
        request.headers_mut().insert(name, value);
    }
    Ok(request)
}

/// Runs `walletgate pay`.
pub(crate) async fn run(args: PayArgs) -> Exit {
    match pay(args).await {
        Ok(()) => Exit::Ok,
        Err(exit) => exit,
    }
}

async fn pay(args: PayArgs) -> Result<(), Exit> {
    let signer = signer(&args)?;
    let request = request(&args)?;
    let policy = SpendPolicy::new()
        .with_max_per_payment_usd(&args.max_usd)
        .map_err(|error| usage(format!("--max-usd {}: {error}", args.max_usd)))?;
    let connector = ClientTls::webpki_roots()
        .https_connector()
        .map_err(|error| usage(format!("TLS: {error}")))?;
    let http = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
    let mut client = X402PaymentLayer::new(signer)
        .with_policy(policy)
        .layer(http);
    let sent = async {
        std::future::poll_fn(|cx| Service::<Request<Full<Bytes>>>::poll_ready(&mut client, cx))
            .await?;
        client.call(request).await
    };
    let response = match sent.await {
        Ok(response) => response,
        Err(error) => return Err(fail(&error)),
    };
    let receipt = response.extensions().get::<Receipt>().cloned();
    let mut body = response.into_body();
    let mut stdout = std::io::stdout().lock();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            eprintln!("walletgate pay: the answer broke off: {error}");
            Exit::Api
        })?;
        if let Some(data) = frame.data_ref() {
            // A closed stdout (e.g. `| head`) ends the output, not the payment.
            let _ = stdout.write_all(data).and_then(|()| stdout.flush());
        }
    }
    let _ = writeln!(stdout);
    if let Some(receipt) = receipt {
        eprintln!("{}", receipt.summary());
    }
    Ok(())
}

fn fail(error: &ClientError) -> Exit {
    eprintln!("walletgate pay: {error}");
    if let ClientError::Api(api) = error
        && !api.body.is_empty()
    {
        eprintln!("{}", String::from_utf8_lossy(&api.body));
    }
    Exit::from(error)
}
