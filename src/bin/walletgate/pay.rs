//! `walletgate pay [-X POST] URL [-d JSON | --data-file F] [--max-usd 0.10] [-H K:V]… [--protocol x402|mpp] [--idempotency-key KEY] [--dry-run]`
//!
//! The key comes from a keystore, a key file or `WALLETGATE_PRIVATE_KEY`
//! ([`KeyArgs`]), never from the command line. The body goes to stdout, one
//! receipt line (payer, amount, network, transaction) to stderr. A paid
//! image job (202) is polled with the same payment until it is done.
//! Nothing printed ever holds the key, a signature or an authorization header.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tower_layer::Layer;
use tower_service::Service;
use walletgate::client::pay::{
    IdempotencyKey, ImageJob, OfferSignatures, Protocol, Receipt, Refusal, SpendPolicy,
    X402PaymentLayer, mpp_offer, parse_quote,
};
use walletgate::tls::ClientTls;

use crate::exit::{Exit, Failure, Format};
use crate::signer::KeyArgs;

/// How often a paid image job is polled, and for how long at most.
const JOB_POLL_INTERVAL: Duration = Duration::from_secs(1);
const JOB_POLL_LIMIT: Duration = Duration::from_secs(600);

/// `walletgate pay`.
#[derive(Args)]
pub(crate) struct PayArgs {
    /// The full URL to call (e.g. http://127.0.0.1:8402/v1/chat/completions)
    url: String,
    /// The HTTP method
    #[arg(long, short = 'X', default_value = "POST")]
    method: String,
    /// The JSON request body
    #[arg(long, short = 'd', conflicts_with = "data_file")]
    data: Option<String>,
    /// A file holding the request body
    #[arg(long, value_name = "FILE")]
    data_file: Option<PathBuf>,
    /// The most one payment may cost, in USD
    #[arg(long, default_value = "0.10")]
    max_usd: String,
    /// An extra request header, `Name: value` (repeatable)
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Ask for the quote only: print the offer that would be signed and the
    /// spend policy's verdict; sign nothing, settle nothing
    #[arg(long)]
    dry_run: bool,
    /// Sign the metered `upto` offer when the server makes one: its amount is
    /// a ceiling (checked against --max-usd) and what the answer used is
    /// settled; the receipt line says what was settled
    #[arg(long)]
    prefer_upto: bool,
    /// The protocol that pays a server offering both x402 and MPP
    /// (`WWW-Authenticate: Payment`, evm/charge): `x402` or `mpp`. A server
    /// offering one is paid through that one
    #[arg(long, value_name = "PROTOCOL", default_value = "x402")]
    protocol: String,
    /// Check the server's signed offers (x402 `offer-receipt`) before paying:
    /// `require` (an unsigned or wrongly signed offer is not paid), `prefer`
    /// (a signed one must hold), `ignore`. Receipts and usage statements are
    /// then checked against the same key after paying
    #[arg(long, value_name = "MODE", default_value = "ignore")]
    offer_signatures: String,
    /// The server's offer-signing address; without it, the `offerSigner` its
    /// `/.well-known/x402` publishes
    #[arg(long, value_name = "ADDRESS")]
    offer_signer: Option<String>,
    /// The payment identifier of this request (16 to 128 of A-Z a-z 0-9 _ -):
    /// sent when the server declares the `payment-identifier` extension, so
    /// running the same command again gets the answer it paid for instead of
    /// paying twice; without it one is made per run
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    #[command(flatten)]
    key: KeyArgs,
}

/// One `-H 'Name: value'` argument, as curl takes it (`pay` and `api request`).
pub(crate) fn header_arg(header: &str) -> Result<(HeaderName, HeaderValue), Failure> {
    let (name, value) = header
        .split_once(':')
        .ok_or_else(|| Failure::usage(format!("--header wants `Name: value`, got `{header}`")))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| Failure::usage(format!("not a header name: `{}`", name.trim())))?;
    // The value is not echoed: it may be a credential.
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| Failure::usage(format!("the value of header `{name}` is not valid")))?;
    Ok((name, value))
}

fn request(args: &PayArgs) -> Result<Request<Full<Bytes>>, Failure> {
    let method = Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| Failure::usage(format!("not an HTTP method: {}", args.method)))?;
    let body = match (&args.data, &args.data_file) {
        (Some(data), _) => Bytes::from(data.clone()),
        (None, Some(path)) => Bytes::from(std::fs::read(path).map_err(|error| {
            Failure::usage(format!("cannot read --data-file {}", path.display()))
                .with_cause(error.to_string())
        })?),
        (None, None) => Bytes::new(),
    };
    let mut request = Request::builder().method(method).uri(&args.url);
    if !body.is_empty() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    let mut request = request
        .body(Full::new(body))
        .map_err(|_| Failure::usage(format!("not a URL: {}", args.url)))?;
    for header in &args.headers {
        let (name, value) = header_arg(header)?;
        request.headers_mut().insert(name, value);
    }
    if let Some(key) = &args.idempotency_key {
        let key = IdempotencyKey::new(key.as_str()).map_err(|error| {
            Failure::usage("--idempotency-key".to_owned()).with_cause(error.to_string())
        })?;
        request.extensions_mut().insert(key);
    }
    Ok(request)
}

/// Runs `walletgate pay`.
pub(crate) async fn run(args: PayArgs, format: Format) -> Exit {
    match pay(args, format).await {
        Ok(exit) => exit,
        Err(failure) => failure.report("pay", format),
    }
}

type Http = Client<walletgate::tls::HttpsConnector, Full<Bytes>>;

fn http() -> Result<Http, Failure> {
    let connector = ClientTls::webpki_roots()
        .https_connector()
        .map_err(|error| Failure::from_error(Exit::Api, &error))?;
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

async fn pay(args: PayArgs, format: Format) -> Result<Exit, Failure> {
    let request = request(&args)?;
    let mut policy = SpendPolicy::new()
        .with_max_per_payment_usd(&args.max_usd)
        .map_err(|error| {
            Failure::usage(format!("--max-usd {}", args.max_usd)).with_cause(error.to_string())
        })?;
    if args.prefer_upto {
        policy = policy.with_upto_preferred();
    }
    let protocol = args
        .protocol
        .parse::<Protocol>()
        .map_err(|why| Failure::usage(format!("--protocol: {why}")))?;
    policy = policy.with_protocol(protocol);
    let http = http()?;
    let offer_signatures = offer_signatures(&args, request.uri(), &http).await?;
    policy = policy.with_offer_signatures(offer_signatures);
    if args.dry_run {
        return dry_run(request, &policy, format).await;
    }
    let signer = args.key.signer()?;
    let uri = request.uri().clone();
    let mut client = X402PaymentLayer::new(signer)
        .with_policy(policy)
        .layer(http.clone());
    let sent = async {
        std::future::poll_fn(|cx| Service::<Request<Full<Bytes>>>::poll_ready(&mut client, cx))
            .await?;
        client.call(request).await
    };
    let response = sent.await.map_err(|error| Failure::from(&error))?;
    let status = response.status();
    let receipt = response.extensions().get::<Receipt>().cloned();
    let mut body = response.into_body();
    if status == StatusCode::ACCEPTED
        && let Some(receipt) = receipt.clone()
    {
        // A paid job: its answer is the job, polled with the same payment.
        let answer = body
            .collect()
            .await
            .map_err(|error| Failure::api("the answer broke off").with_cause(error.to_string()))?
            .to_bytes();
        let done = match ImageJob::new(&uri, &answer, receipt.clone()) {
            Some(job) => poll(&job, &http).await?,
            None => serde_json::from_slice(&answer).unwrap_or(Value::Null),
        };
        println!("{done}");
        eprintln!("{}", receipt.summary());
        return Ok(Exit::Ok);
    }
    let mut stdout = std::io::stdout().lock();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|error| Failure::api("the answer broke off").with_cause(error.to_string()))?;
        if let Some(data) = frame.data_ref() {
            // A closed stdout (e.g. `| head`) ends the output, not the payment.
            let _ = stdout.write_all(data).and_then(|()| stdout.flush());
        }
    }
    let _ = writeln!(stdout);
    if let Some(receipt) = receipt {
        eprintln!("{}", receipt.summary());
        if receipt.overcharged() {
            return Err(Failure::new(
                Exit::Payment,
                "the server settled more than the payment signed for",
            ));
        }
        let failures = receipt.proof_failures();
        if !failures.is_empty() {
            return Err(Failure::new(
                Exit::Payment,
                format!(
                    "the server's signed proof does not hold: {}",
                    failures.join("; ")
                ),
            ));
        }
    }
    Ok(Exit::Ok)
}

/// `--offer-signatures` and the key it checks against: `--offer-signer`,
/// or what the server publishes in its `/.well-known/x402`.
async fn offer_signatures(
    args: &PayArgs,
    url: &http::Uri,
    http: &Http,
) -> Result<OfferSignatures, Failure> {
    let mode = args.offer_signatures.as_str();
    if !matches!(mode, "require" | "prefer" | "ignore") {
        return Err(Failure::usage(format!(
            "--offer-signatures takes require, prefer or ignore, not `{mode}`"
        )));
    }
    if mode == "ignore" {
        return Ok(OfferSignatures::Ignore);
    }
    let signer = match &args.offer_signer {
        Some(text) => text
            .parse::<alloy_primitives::Address>()
            .map_err(|_| Failure::usage(format!("--offer-signer is not an address: `{text}`")))?,
        None => published_offer_signer(url, http).await?,
    };
    Ok(match mode {
        "require" => OfferSignatures::Require(signer),
        _ => OfferSignatures::Prefer(signer),
    })
}

/// The `payment.offerSigner` of the server's `/.well-known/x402`.
async fn published_offer_signer(
    url: &http::Uri,
    http: &Http,
) -> Result<alloy_primitives::Address, Failure> {
    let (Some(scheme), Some(authority)) = (url.scheme_str(), url.authority()) else {
        return Err(Failure::usage(format!("not a URL: {url}")));
    };
    let document = format!("{scheme}://{authority}/.well-known/x402");
    let unpublished = || {
        Failure::new(
            Exit::Payment,
            format!("{document} publishes no offerSigner: give --offer-signer"),
        )
    };
    let request = Request::get(&document)
        .body(Full::new(Bytes::new()))
        .map_err(|_| Failure::usage(format!("not a URL: {url}")))?;
    let response = http
        .request(request)
        .await
        .map_err(|error| Failure::api(format!("GET {document}")).with_cause(error.to_string()))?;
    if !response.status().is_success() {
        return Err(unpublished());
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| Failure::api(format!("GET {document}")).with_cause(error.to_string()))?
        .to_bytes();
    serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|document| {
            document
                .pointer("/payment/offerSigner")?
                .as_str()?
                .parse()
                .ok()
        })
        .ok_or_else(unpublished)
}

/// Polls a paid job until it is done (the server answers a replay of its
/// payment uncharged).
async fn poll(job: &ImageJob, http: &Http) -> Result<Value, Failure> {
    let started = std::time::Instant::now();
    loop {
        if let Some(done) = job
            .poll(http)
            .await
            .map_err(|error| Failure::from(&error))?
        {
            return Ok(done);
        }
        if started.elapsed() > JOB_POLL_LIMIT {
            return Err(Failure::api(format!(
                "the paid job {} was not done after {} s; poll {} again later",
                job.id,
                JOB_POLL_LIMIT.as_secs(),
                job.poll_url
            )));
        }
        tokio::time::sleep(JOB_POLL_INTERVAL).await;
    }
}

/// Sends the request unpaid and reports the quote: the offer the payer would
/// sign (the first, or the metered one with --prefer-upto, as the paying
/// layer picks it) and the policy's verdict.
async fn dry_run(
    request: Request<Full<Bytes>>,
    policy: &SpendPolicy,
    format: Format,
) -> Result<Exit, Failure> {
    let response = http()?
        .request(request)
        .await
        .map_err(|error| Failure::from_error(Exit::Api, &error))?;
    let status = response.status();
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|error| Failure::api("the answer broke off").with_cause(error.to_string()))?
        .to_bytes();
    if status != StatusCode::PAYMENT_REQUIRED {
        let text = format!("no payment asked: the server answered {status}");
        match format {
            Format::Json => println!("{}", json!({ "status": status.as_u16(), "offer": null })),
            Format::Text => println!("{text}"),
        }
        return Ok(Exit::Ok);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let quote = parse_quote(&parts.headers, &body);
    // As the client chooses: MPP when preferred or the only way offered.
    let mpp = mpp_offer(&parts.headers, now);
    let use_mpp =
        matches!(mpp, Some(Ok(_))) && (quote.is_none() || policy.protocol() == Protocol::Mpp);
    let (protocol, offer, verdict) = match (mpp, quote) {
        (Some(Ok(offer)), _) if use_mpp => {
            // MPP offers are never signed: required signatures refuse them.
            let verdict = match policy.offer_signatures() {
                OfferSignatures::Require(_) => Err(Refusal::UnsignedOffer),
                _ => policy.authorize(&offer),
            };
            (Protocol::Mpp, offer, verdict)
        }
        (_, Some(quote)) => {
            let offer = policy
                .choose(&quote)
                .ok_or_else(|| Failure::new(Exit::Payment, "the quote offers no way to pay"))?
                .clone();
            let verdict = policy
                .check_offer(&quote, &offer, now)
                .and_then(|()| policy.authorize(&offer));
            (Protocol::X402, offer, verdict)
        }
        (Some(Err(why)), None) => return Err(Failure::new(Exit::Payment, why.to_string())),
        (_, None) => {
            return Err(Failure::api(
                "the 402 answer holds no x402 quote or MPP challenge",
            ));
        }
    };
    let offer_json = serde_json::to_value(&offer).unwrap_or(Value::Null);
    match format {
        Format::Json => println!(
            "{}",
            json!({
                "protocol": protocol.as_str(),
                "offer": offer_json,
                "verdict": match &verdict { Ok(()) => "would pay".to_owned(), Err(refusal) => refusal.to_string() },
                "wouldPay": verdict.is_ok(),
            })
        ),
        Format::Text => {
            println!("protocol: {protocol}");
            println!("offer: {offer_json:#}");
            match &verdict {
                Ok(()) => println!("verdict: would pay (nothing signed, nothing settled)"),
                Err(refusal) => println!("verdict: would refuse: {refusal}"),
            }
        }
    }
    // The verdict is printed above; the exit code repeats it.
    Ok(if verdict.is_ok() {
        Exit::Ok
    } else {
        Exit::Payment
    })
}
