//! The data-API commands (Area A): `login`, `whoami`, `auth …`,
//! `api request` and `mcp-bridge`, following `@opensea/cli` against any base
//! URL. Nothing here prints a private key, PAT, JWT, cookie, signature or
//! authorization header; the sign-in lives in [`auth_file`].

mod auth_file;
mod bridge;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::{Args, Subcommand};
use http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use walletgate::client::wallet::{Credentials, WalletAuth, WalletConfig, WalletError};
use walletgate::siwe::Timestamp;

use self::auth_file::AuthFile;
use crate::exit::{Exit, Failure, Format};
use crate::signer::KeyArgs;

/// The data API's address when neither `--base-url` nor a sign-in names one.
const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";

/// Where the data API is and its key: only on the commands that call it.
#[derive(Args)]
pub(crate) struct Connection {
    /// The data API's base URL [default: the saved sign-in's, else http://127.0.0.1:8080]
    #[arg(long, env = "WALLETGATE_BASE_URL")]
    base_url: Option<String>,
    /// The API key, sent as X-API-KEY
    #[arg(long, env = "WALLETGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

/// The data-API commands.
#[derive(Subcommand)]
pub(crate) enum DataCommand {
    /// Sign in with a wallet (SIWE), create a personal access token with the
    /// given scopes and mint a wallet JWT (also `auth login`)
    Login(LoginArgs),
    /// Who is signed in, where, with which scopes and until when (never a
    /// token; also `auth status`)
    Whoami,
    /// The saved sign-in: login, status, scopes, refresh, revoke, clear
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// Call the data API
    Api {
        #[command(subcommand)]
        command: ApiCommand,
    },
    /// A stdio MCP server that forwards to the data API's /mcp with the API
    /// key and a fresh wallet JWT (what a desktop MCP host launches)
    McpBridge(BridgeArgs),
}

/// `login`.
#[derive(Args)]
pub(crate) struct LoginArgs {
    /// Comma-separated scopes, for example read:favorites,read:wallets
    #[arg(long, value_delimiter = ',', required = true)]
    scopes: Vec<String>,
    #[command(flatten)]
    key: KeyArgs,
    /// Lifetime of the personal access token
    #[arg(long, default_value_t = walletgate::client::wallet::DEFAULT_PAT_EXPIRES_IN_DAYS)]
    expires_in_days: u32,
    /// The SIWE domain the server expects [default: the base URL's host:port]
    #[arg(long)]
    siwe_domain: Option<String>,
    /// The SIWE URI the server expects [default: the base URL]
    #[arg(long)]
    siwe_uri: Option<String>,
    /// The SIWE chain id
    #[arg(long, default_value_t = 1)]
    chain_id: u64,
    #[command(flatten)]
    connection: Connection,
}

/// `auth …`.
#[derive(Subcommand)]
pub(crate) enum AuthCommand {
    /// Sign in with a wallet (the same as `walletgate login`)
    Login(LoginArgs),
    /// Who is signed in, where, with which scopes and until when (never a token)
    Status,
    /// The scopes of the saved sign-in
    Scopes,
    /// Mint a new wallet JWT from the personal access token now
    Refresh(Connection),
    /// Revoke the personal access token on the server, then forget it
    Revoke(Connection),
    /// Delete the local sign-in only (the token stays valid on the server)
    Clear,
}

/// `api …`.
#[derive(Subcommand)]
pub(crate) enum ApiCommand {
    /// Send METHOD PATH (or -X METHOD PATH) with the API key and the wallet
    /// JWT (refreshed once on 401)
    Request(RequestArgs),
}

/// `api request`.
#[derive(Args)]
pub(crate) struct RequestArgs {
    /// GET, POST, PUT, DELETE, … (or the PATH, with -X naming the method)
    #[arg(value_name = "METHOD")]
    first: String,
    /// The path, for example /api/v2/account/0x…/favorites
    #[arg(value_name = "PATH")]
    path: Option<String>,
    /// The method, as `curl -X` and `walletgate pay -X` take it [default: GET]
    #[arg(long = "method", short = 'X')]
    method: Option<String>,
    /// Query parameters as a JSON object
    #[arg(long)]
    params: Option<String>,
    /// A JSON request body
    #[arg(long, short = 'd')]
    data: Option<String>,
    /// An extra request header, `Name: value` (repeatable)
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    #[command(flatten)]
    connection: Connection,
}

/// `mcp-bridge`.
#[derive(Args)]
pub(crate) struct BridgeArgs {
    /// The MCP endpoint [default: {base-url}/mcp]
    #[arg(long)]
    url: Option<String>,
    #[command(flatten)]
    connection: Connection,
}

/// Runs `command`; errors go to standard error (and stdout with `--format json`).
pub(crate) async fn run(command: DataCommand, format: Format) -> Exit {
    let (name, result) = match command {
        DataCommand::Login(args) => ("login", login(format, args).await),
        DataCommand::Whoami => ("whoami", status(format)),
        DataCommand::Auth { command } => match command {
            AuthCommand::Login(args) => ("auth login", login(format, args).await),
            AuthCommand::Status => ("auth status", status(format)),
            AuthCommand::Scopes => ("auth scopes", scopes(format)),
            AuthCommand::Refresh(connection) => {
                ("auth refresh", refresh(format, &connection).await)
            }
            AuthCommand::Revoke(connection) => ("auth revoke", revoke(format, &connection).await),
            AuthCommand::Clear => ("auth clear", clear(format)),
        },
        DataCommand::Api {
            command: ApiCommand::Request(args),
        } => ("api request", request(format, args).await),
        DataCommand::McpBridge(args) => ("mcp-bridge", bridge(args).await),
    };
    match result {
        Ok(()) => Exit::Ok,
        Err(failure) => failure.report(name, format),
    }
}

/// Prints `text` or `json` as `--format` asks.
fn print(format: Format, text: &str, json: &Value) {
    match format {
        Format::Text => println!("{text}"),
        Format::Json => println!("{json:#}"),
    }
}

fn rfc3339(at: SystemTime) -> String {
    let millis = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    Timestamp::from_unix_millis(i64::try_from(millis).unwrap_or(i64::MAX)).to_string()
}

/// A client for the base URL of `--base-url`, else of `saved`, else the default.
fn client(connection: &Connection, saved: Option<&AuthFile>) -> Result<WalletAuth, Failure> {
    let base_url = connection
        .base_url
        .as_deref()
        .or(saved.map(|file| file.base_url.as_str()))
        .unwrap_or(DEFAULT_BASE_URL);
    let api_key = connection
        .api_key
        .as_deref()
        .ok_or_else(|| Failure::auth("set WALLETGATE_API_KEY (or --api-key) to the API key"))?;
    Ok(WalletAuth::new(WalletConfig::new(base_url, api_key)?)?)
}

/// The saved sign-in, or "sign in again".
fn saved() -> Result<AuthFile, Failure> {
    auth_file::load()
        .map_err(Failure::auth)?
        .ok_or_else(|| Failure::auth("not signed in: sign in with `walletgate login --scopes …`"))
}

/// The saved credentials, or "sign in again" (after `auth revoke`).
fn credentials(saved: &AuthFile) -> Result<Credentials, Failure> {
    saved.credentials.clone().ok_or_else(|| {
        Failure::auth("the sign-in was revoked: sign in again with `walletgate login --scopes …`")
    })
}

/// A client resumed from the saved sign-in.
fn signed_in(connection: &Connection) -> Result<(WalletAuth, AuthFile), Failure> {
    let saved = saved()?;
    let credentials = credentials(&saved)?;
    let auth = client(connection, Some(&saved))?.resume(credentials)?;
    Ok((auth, saved))
}

/// Writes what `auth` holds now (nothing after a refused PAT or a revoke).
fn persist(auth: &WalletAuth, saved: &mut AuthFile) -> Result<PathBuf, Failure> {
    saved.credentials = auth.credentials();
    auth_file::save(saved).map_err(Failure::api)
}

async fn login(format: Format, args: LoginArgs) -> Result<(), Failure> {
    if args.scopes.iter().all(|scope| scope.trim().is_empty()) {
        return Err(Failure::usage("--scopes names no scope"));
    }
    let signer = args.key.signer()?;
    let previous = auth_file::load().ok().flatten();
    let connection = &args.connection;
    let base_url = connection
        .base_url
        .as_deref()
        .or(previous.as_ref().map(|file| file.base_url.as_str()))
        .unwrap_or(DEFAULT_BASE_URL);
    let api_key = connection
        .api_key
        .as_deref()
        .ok_or_else(|| Failure::auth("set WALLETGATE_API_KEY (or --api-key) to the API key"))?;
    let mut config = WalletConfig::new(base_url, api_key)?
        .with_chain_id(args.chain_id)
        .with_pat_expires_in_days(args.expires_in_days)
        .with_pat_label("walletgate-cli");
    if let Some(domain) = &args.siwe_domain {
        config = config.with_siwe_domain(domain);
    }
    if let Some(uri) = &args.siwe_uri {
        config = config.with_siwe_uri(uri);
    }
    let auth = WalletAuth::new(config)?;
    let scopes: Vec<&str> = args.scopes.iter().map(String::as_str).collect();
    let token = auth.authenticate(&signer, &scopes).await?;
    let credentials = auth.credentials().ok_or(WalletError::NotSignedIn)?;
    let mut file = AuthFile {
        base_url: auth.config().base_url().to_owned(),
        address: credentials.address().to_owned(),
        credentials: None,
    };
    let path = persist(&auth, &mut file)?;
    print(
        format,
        &format!(
            "Signed in to {} as {} with scopes {}.\nThe wallet JWT expires at {} and is re-minted \
             from the personal access token (valid until {}).\nSaved to {}.",
            file.base_url,
            file.address,
            token.scopes.join(","),
            rfc3339(token.expires_at),
            rfc3339(credentials.pat_expires_at()),
            path.display()
        ),
        &json!({
            "baseUrl": file.base_url,
            "address": file.address,
            "scopes": token.scopes,
            "expiresAt": rfc3339(token.expires_at),
            "patExpiresAt": rfc3339(credentials.pat_expires_at()),
            "authFile": path,
        }),
    );
    Ok(())
}

fn status(format: Format) -> Result<(), Failure> {
    let saved = saved()?;
    let credentials = credentials(&saved)?;
    let jwt_expires_at = credentials.jwt_expires_at().map(rfc3339);
    print(
        format,
        &format!(
            "{} on {}\nscopes: {}\nwallet JWT expires at: {}\npersonal access token expires at: {}",
            saved.address,
            saved.base_url,
            credentials.scopes().join(","),
            jwt_expires_at.as_deref().unwrap_or("none held"),
            rfc3339(credentials.pat_expires_at()),
        ),
        &json!({
            "address": saved.address,
            "baseUrl": saved.base_url,
            "scopes": credentials.scopes(),
            "expiresAt": jwt_expires_at,
            "patExpiresAt": rfc3339(credentials.pat_expires_at()),
        }),
    );
    Ok(())
}

fn scopes(format: Format) -> Result<(), Failure> {
    let saved = saved()?;
    let credentials = credentials(&saved)?;
    print(
        format,
        &credentials.scopes().join("\n"),
        &json!({ "scopes": credentials.scopes() }),
    );
    Ok(())
}

async fn refresh(format: Format, connection: &Connection) -> Result<(), Failure> {
    let (auth, mut saved) = signed_in(connection)?;
    let refreshed = auth.refresh().await;
    persist(&auth, &mut saved)?;
    let token = refreshed?;
    print(
        format,
        &format!(
            "Minted a new wallet JWT; it expires at {}.",
            rfc3339(token.expires_at)
        ),
        &json!({ "expiresAt": rfc3339(token.expires_at), "scopes": token.scopes }),
    );
    Ok(())
}

async fn revoke(format: Format, connection: &Connection) -> Result<(), Failure> {
    let (auth, mut saved) = signed_in(connection)?;
    auth.revoke().await?;
    persist(&auth, &mut saved)?;
    print(
        format,
        "Revoked the personal access token and forgot it and its JWT; sign in again with \
         `walletgate login` to call wallet routes.",
        &json!({ "revoked": true }),
    );
    Ok(())
}

fn clear(format: Format) -> Result<(), Failure> {
    let path = auth_file::path().map_err(Failure::api)?;
    let removed = auth_file::remove().map_err(Failure::api)?;
    let note = "The personal access token stays valid on the server until it is revoked or \
                expires (`walletgate auth revoke` revokes it).";
    let text = if removed {
        format!("Removed {}. {note}", path.display())
    } else {
        format!("No sign-in was saved at {}.", path.display())
    };
    print(
        format,
        &text,
        &json!({ "removed": removed, "authFile": path, "note": note }),
    );
    Ok(())
}

/// `key=value&…` from a JSON object (arrays repeat the key).
fn query(params: &str) -> Result<String, Failure> {
    let Ok(Value::Object(params)) = serde_json::from_str::<Value>(params) else {
        return Err(Failure::usage("--params must be a JSON object"));
    };
    let mut pairs = Vec::new();
    for (name, value) in &params {
        let values = match value {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        };
        for value in values {
            let value = match value {
                Value::String(text) => text,
                Value::Null => String::new(),
                other => other.to_string(),
            };
            pairs.push(format!(
                "{}={}",
                percent_encode(name),
                percent_encode(&value)
            ));
        }
    }
    Ok(pairs.join("&"))
}

fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

async fn request(format: Format, args: RequestArgs) -> Result<(), Failure> {
    let (method, path) = match (&args.path, &args.method) {
        (Some(_), Some(_)) => {
            return Err(Failure::usage(
                "the method is named twice: give METHOD PATH or -X METHOD PATH",
            ));
        }
        (Some(path), None) => (args.first.as_str(), path.clone()),
        (None, method) => (method.as_deref().unwrap_or("GET"), args.first.clone()),
    };
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .map_err(|_| Failure::usage(format!("{method} is not an HTTP method")))?;
    if !path.starts_with('/') {
        return Err(Failure::usage(
            "PATH must start with / (for example /api/v2/collections)",
        ));
    }
    let mut path = path;
    if let Some(params) = &args.params {
        let query = query(params)?;
        if !query.is_empty() {
            path.push(if path.contains('?') { '&' } else { '?' });
            path.push_str(&query);
        }
    }
    let mut builder = Request::builder().method(method).uri(&path);
    for header in &args.headers {
        let (name, value) = crate::pay::header_arg(header)?;
        builder = builder.header(name, value);
    }
    let body = match &args.data {
        Some(data) => {
            serde_json::from_str::<Value>(data).map_err(|error| {
                Failure::usage("--data must be JSON").with_cause(error.to_string())
            })?;
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Bytes::from(data.clone())
        }
        None => Bytes::new(),
    };
    let request = builder
        .body(body)
        .map_err(|_| Failure::usage(format!("{path} is not a valid request path")))?;

    let (auth, mut saved) = signed_in(&args.connection)?;
    let sent = auth.send(request).await;
    // A refresh or a refused PAT changed what is held: keep it.
    if auth.credentials() != saved.credentials {
        persist(&auth, &mut saved)?;
    }
    let response = sent?;
    let status = response.status();
    let body = response.body();
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if status.is_success() {
        match (&parsed, format) {
            (Some(json), Format::Text) => println!("{json:#}"),
            (Some(json), Format::Json) => println!("{json}"),
            (None, _) => println!("{}", String::from_utf8_lossy(body)),
        }
        return Ok(());
    }
    let message = parsed
        .as_ref()
        .and_then(|json| json["error"]["message"].as_str())
        .map_or_else(|| String::from_utf8_lossy(body).into_owned(), str::to_owned);
    let exit = match status {
        StatusCode::TOO_MANY_REQUESTS => Exit::RateLimited,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Exit::Auth,
        _ => Exit::Api,
    };
    Err(Failure::new(exit, format!("the API answered {status}")).with_cause(message))
}

async fn bridge(args: BridgeArgs) -> Result<(), Failure> {
    let (auth, saved) = signed_in(&args.connection)?;
    let url = args
        .url
        .unwrap_or_else(|| format!("{}/mcp", auth.config().base_url()));
    bridge::serve(auth, saved, &url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_become_an_encoded_query() {
        assert_eq!(
            query(r#"{"limit": 2, "after": "a b&c", "tag": ["x", "y"]}"#).unwrap(),
            "after=a%20b%26c&limit=2&tag=x&tag=y"
        );
        assert!(query("[1]").is_err());
    }
}
