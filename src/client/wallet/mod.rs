//! The client half of Area A: sign in with a wallet, hold a personal access
//! token (PAT), keep a short-lived wallet JWT fresh, send requests with it.
//!
//! [`WalletAuth`] follows the OpenSea SDK's flow against any base URL:
//!
//! 1. [`authenticate`](WalletAuth::authenticate): SIWE nonce, an EIP-4361
//!    message for the server's domain, URI and chain (rendered by
//!    [`SiweMessage`], never by hand), an EIP-191 signature from an alloy
//!    [`Signer`], verify (session cookies), PAT creation with an explicit
//!    scope list, exchange for a wallet JWT;
//! 2. [`valid_token`](WalletAuth::valid_token): the JWT, re-minted from the
//!    PAT when it expires within [`REFRESH_WINDOW_SECS`];
//! 3. [`send`](WalletAuth::send): `X-API-KEY` and the Bearer JWT on every
//!    request; on 401 one refresh and one retry, on 403 a
//!    [`WalletError::MissingScope`] naming the scope, on 429 one wait of a
//!    bounded `Retry-After`;
//! 4. [`revoke`](WalletAuth::revoke): deletes the PAT with the held SIWE
//!    session (refreshing it once if needed) and forgets everything.
//!
//! When the PAT is expired, revoked or unknown the client answers
//! [`WalletError::ReauthRequired`] at once: a new sign-in is the only cure,
//! so nothing loops. Time comes from an injectable [`Clock`](crate::clock::Clock);
//! the network from any [`Transport`] (a tower `Service`).
//!
//! ```no_run
//! # async fn run() -> Result<(), walletgate::client::wallet::WalletError> {
//! use walletgate::client::wallet::{WalletAuth, WalletConfig};
//! use alloy_signer_local::PrivateKeySigner;
//!
//! let config = WalletConfig::new("http://127.0.0.1:8080", "my-api-key")?;
//! let auth = WalletAuth::new(config)?;
//! // Any alloy `Signer`: alloy's `PrivateKeySigner` (a key in memory), a
//! // keystore, a KMS signer, or x402's `Payer` with `client-pay`.
//! let signer: PrivateKeySigner = std::env::var("WALLET_KEY")
//!     .unwrap_or_default()
//!     .parse()
//!     .map_err(|_| walletgate::client::wallet::WalletError::Config("WALLET_KEY: not a key".into()))?;
//! auth.authenticate(&signer, &["read:favorites"]).await?;
//! let request = http::Request::get("/api/v2/account/0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266/favorites")
//!     .body(bytes::Bytes::new())
//!     .expect("a valid request");
//! let page = auth.send(request).await?;
//! println!("{}", String::from_utf8_lossy(page.body()));
//! # Ok(())
//! # }
//! ```

mod error;
#[cfg(test)]
mod tests;
mod token;
mod transport;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use alloy_signer::Signer;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use serde::Deserialize;
use serde_json::{Value, json};

pub use error::WalletError;
pub use token::{Credentials, WalletToken};
pub use transport::{
    BoxError, DefaultConnector, DefaultTransport, MAX_RESPONSE_BODY_BYTES, Transport,
    default_transport,
};

use crate::clock::{SharedClock, SystemClock};
use crate::siwe::{SiweMessage, SiweMessageFields, Timestamp};

/// A JWT expiring within this many seconds is re-minted before use (the
/// OpenSea SDK's window).
pub const REFRESH_WINDOW_SECS: u64 = 60;
/// The PAT lifetime asked for unless configured.
pub const DEFAULT_PAT_EXPIRES_IN_DAYS: u32 = 30;
/// The longest `Retry-After` the client waits out (once) before answering
/// [`WalletError::RateLimited`].
pub const DEFAULT_MAX_RETRY_AFTER_SECS: u64 = 10;
/// Per-request timeout unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The API key header.
const API_KEY_HEADER: HeaderName = HeaderName::from_static("x-api-key");
/// The cookie names the server's SIWE verify sets (walletgate's `tokens`).
const SESSION_COOKIE: &str = "access_token";
const REFRESH_COOKIE: &str = "refresh_token";

/// Where and how a [`WalletAuth`] signs in. `Debug` hides the API key.
#[derive(Clone)]
pub struct WalletConfig {
    base_url: String,
    api_key: HeaderValue,
    siwe_domain: String,
    siwe_uri: String,
    chain_id: u64,
    statement: String,
    pat_label: String,
    pat_expires_in_days: u32,
    max_retry_after_secs: u64,
    timeout: Duration,
}

impl WalletConfig {
    /// A server at `base_url` (`http(s)://host[:port]`) and its API key. The
    /// SIWE domain and URI default to the base URL's authority and the base
    /// URL itself, the chain to 1.
    pub fn new(base_url: &str, api_key: &str) -> Result<Self, WalletError> {
        let base_url = base_url.trim().trim_end_matches('/');
        let uri: Uri = base_url
            .parse()
            .map_err(|_| WalletError::Config(format!("{base_url:?} is not a URL")))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(WalletError::Config(format!(
                "{base_url:?} must look like http(s)://host[:port]"
            )));
        };
        if !matches!(scheme, "http" | "https") || !matches!(uri.path(), "" | "/") {
            return Err(WalletError::Config(format!(
                "{base_url:?} must look like http(s)://host[:port]"
            )));
        }
        let mut api_key = HeaderValue::from_str(api_key.trim())
            .ok()
            .filter(|key| !key.is_empty())
            .ok_or_else(|| WalletError::Config("the API key is empty or malformed".to_owned()))?;
        api_key.set_sensitive(true);
        Ok(Self {
            siwe_domain: authority.as_str().to_owned(),
            siwe_uri: base_url.to_owned(),
            base_url: base_url.to_owned(),
            api_key,
            chain_id: 1,
            statement: "Sign in to the walletgate data API.".to_owned(),
            pat_label: "walletgate".to_owned(),
            pat_expires_in_days: DEFAULT_PAT_EXPIRES_IN_DAYS,
            max_retry_after_secs: DEFAULT_MAX_RETRY_AFTER_SECS,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The SIWE `domain` the server expects, if not the base URL's authority.
    pub fn with_siwe_domain(mut self, domain: &str) -> Self {
        domain.clone_into(&mut self.siwe_domain);
        self
    }

    /// The SIWE `URI` the server expects, if not the base URL.
    pub fn with_siwe_uri(mut self, uri: &str) -> Self {
        uri.clone_into(&mut self.siwe_uri);
        self
    }

    /// The SIWE chain id (default 1).
    pub fn with_chain_id(mut self, chain_id: u64) -> Self {
        self.chain_id = chain_id;
        self
    }

    /// The label of PATs this client creates.
    pub fn with_pat_label(mut self, label: &str) -> Self {
        label.clone_into(&mut self.pat_label);
        self
    }

    /// The lifetime asked for new PATs.
    pub fn with_pat_expires_in_days(mut self, days: u32) -> Self {
        self.pat_expires_in_days = days;
        self
    }

    /// The longest `Retry-After` waited out once (0: never wait).
    pub fn with_max_retry_after_secs(mut self, secs: u64) -> Self {
        self.max_retry_after_secs = secs;
        self
    }

    /// The bound on each HTTP exchange.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl fmt::Debug for WalletConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"[redacted]")
            .field("siwe_domain", &self.siwe_domain)
            .field("siwe_uri", &self.siwe_uri)
            .field("chain_id", &self.chain_id)
            .field("pat_expires_in_days", &self.pat_expires_in_days)
            .field("max_retry_after_secs", &self.max_retry_after_secs)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A signed-in wallet client: see the [module docs](self).
pub struct WalletAuth<T = DefaultTransport> {
    config: WalletConfig,
    transport: T,
    clock: SharedClock,
    held: Mutex<Option<Credentials>>,
}

impl<T> fmt::Debug for WalletAuth<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletAuth")
            .field("config", &self.config)
            .field("held", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl WalletAuth<DefaultTransport> {
    /// A client over hyper-util's pooled client (HTTPS with feature `rustls`).
    pub fn new(config: WalletConfig) -> Result<Self, WalletError> {
        Ok(Self::new_with_transport(config, default_transport()?))
    }
}

/// The answer of the SIWE nonce endpoint.
#[derive(Deserialize)]
struct NonceAnswer {
    nonce: String,
}

/// The answer of PAT creation (the secret is shown once).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreatedPat {
    id: String,
    token: String,
    expires_at: String,
}

/// The answer of the PAT -> JWT exchange.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Exchanged {
    access_token: String,
    expires_in: u64,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    token_scopes: Vec<String>,
}

impl<T> WalletAuth<T> {
    fn lock(&self) -> MutexGuard<'_, Option<Credentials>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The credentials held now (for saving between runs), if signed in.
    pub fn credentials(&self) -> Option<Credentials> {
        self.lock().clone()
    }

    /// Forgets the credentials held in memory (the PAT stays valid on the
    /// server until revoked or expired).
    pub fn clear(&self) {
        *self.lock() = None;
    }

    /// The configuration.
    pub fn config(&self) -> &WalletConfig {
        &self.config
    }
}

impl<T: Transport> WalletAuth<T> {
    /// A client over `transport`, reading the system clock.
    pub fn new_with_transport(config: WalletConfig, transport: T) -> Self {
        Self {
            config,
            transport,
            clock: Arc::new(SystemClock),
            held: Mutex::new(None),
        }
    }

    /// Reads `clock` instead of the system clock (tests use a `FakeClock`).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Resumes credentials saved from [`credentials`](Self::credentials);
    /// refused when they belong to another server.
    pub fn resume(self, credentials: Credentials) -> Result<Self, WalletError> {
        if credentials.base_url != self.config.base_url {
            return Err(WalletError::Config(format!(
                "the saved sign-in is for {}, not {}: sign in again",
                credentials.base_url, self.config.base_url
            )));
        }
        *self.lock() = Some(credentials);
        Ok(self)
    }

    fn now_unix_secs(&self) -> u64 {
        self.clock.now_unix_secs()
    }

    /// Signs in as `signer`'s wallet and mints a wallet JWT with exactly
    /// `scopes` (at least one). Replaces whatever was held.
    pub async fn authenticate<S>(
        &self,
        signer: &S,
        scopes: &[&str],
    ) -> Result<WalletToken, WalletError>
    where
        S: Signer + Sync + ?Sized,
    {
        if scopes.iter().all(|scope| scope.trim().is_empty()) {
            return Err(WalletError::NoScopes);
        }
        let scopes: Vec<&str> = scopes
            .iter()
            .map(|scope| scope.trim())
            .filter(|scope| !scope.is_empty())
            .collect();

        let nonce = self
            .request(Method::POST, "/api/v2/auth/siwe/nonce", &[], None)
            .await?;
        let nonce: NonceAnswer = sign_in_step(&nonce, StatusCode::OK, "nonce")?;

        let fields = SiweMessageFields {
            domain: self.config.siwe_domain.clone(),
            address: signer.address().to_checksum(None),
            statement: Some(self.config.statement.clone()),
            uri: self.config.siwe_uri.clone(),
            version: "1".to_owned(),
            chain_id: self.config.chain_id,
            nonce: nonce.nonce,
            issued_at: Timestamp::from_unix_millis(
                i64::try_from(self.clock.now_unix_millis()).unwrap_or(i64::MAX),
            )
            .to_string(),
            ..SiweMessageFields::default()
        };
        let message = SiweMessage::from_fields(&fields)
            .map_err(|error| WalletError::Protocol(format!("SIWE message: {error}")))?;
        let signature = signer
            .sign_message(message.to_string().as_bytes())
            .await
            .map_err(|error| WalletError::Signer(error.to_string()))?;
        let signature = format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes()));
        let body = json!({ "message": fields, "signature": signature });
        let verified = self
            .request(Method::POST, "/api/v2/auth/siwe/verify", &[], Some(body))
            .await?;
        let _: Value = sign_in_step(&verified, StatusCode::OK, "SIWE verify")?;
        let (session_cookie, refresh_cookie) = set_cookies(&verified);
        let session = session_cookie
            .clone()
            .ok_or_else(|| WalletError::Protocol("SIWE verify set no session cookie".to_owned()))?;

        let body = json!({
            "label": self.config.pat_label,
            "scopes": scopes,
            "expiresInDays": self.config.pat_expires_in_days,
        });
        let created = self
            .request(
                Method::POST,
                "/api/v2/auth/tokens",
                &[(header::COOKIE, session)],
                Some(body),
            )
            .await?;
        let created: CreatedPat = sign_in_step(&created, StatusCode::CREATED, "token creation")?;
        let pat_expires_at = created
            .expires_at
            .parse::<Timestamp>()
            .map_err(|_| WalletError::Protocol("the PAT's expiresAt is not RFC 3339".to_owned()))?;

        *self.lock() = Some(Credentials {
            base_url: self.config.base_url.clone(),
            address: signer.address().to_checksum(None),
            scopes: scopes.iter().map(|scope| (*scope).to_owned()).collect(),
            pat_id: created.id,
            pat: created.token,
            pat_expires_at_unix_secs: u64::try_from(pat_expires_at.unix_millis() / 1000)
                .unwrap_or(0),
            jwt: None,
            jwt_expires_at_unix_secs: 0,
            session_cookie,
            refresh_cookie,
        });
        self.refresh().await
    }

    /// The current JWT, re-minted from the PAT when it expires within
    /// [`REFRESH_WINDOW_SECS`].
    pub async fn valid_token(&self) -> Result<WalletToken, WalletError> {
        {
            let held = self.lock();
            let credentials = held.as_ref().ok_or(WalletError::NotSignedIn)?;
            let fresh_until = self.now_unix_secs().saturating_add(REFRESH_WINDOW_SECS);
            if credentials.jwt_expires_at_unix_secs > fresh_until
                && let Some(token) = credentials.token()
            {
                return Ok(token);
            }
        }
        self.refresh().await
    }

    /// Mints a new JWT from the PAT now. An expired PAT (by the clock) is
    /// [`WalletError::ReauthRequired`] without a network call; a PAT the
    /// server refuses is too, and the credentials are dropped.
    pub async fn refresh(&self) -> Result<WalletToken, WalletError> {
        let (pat, pat_expires_at_unix_secs) = {
            let held = self.lock();
            let credentials = held.as_ref().ok_or(WalletError::NotSignedIn)?;
            (
                credentials.pat.clone(),
                credentials.pat_expires_at_unix_secs,
            )
        };
        if self.now_unix_secs() >= pat_expires_at_unix_secs {
            self.clear();
            return Err(WalletError::ReauthRequired(
                "the personal access token has expired".to_owned(),
            ));
        }
        let body = json!({ "subjectToken": pat, "subjectTokenType": "ACCESS_TOKEN" });
        let minted_at = self.now_unix_secs();
        let response = self
            .request(
                Method::POST,
                "/api/v2/auth/tokens/exchange",
                &[],
                Some(body),
            )
            .await?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::UNAUTHORIZED if !is_api_key_refusal(&response) => {
                self.clear();
                return Err(WalletError::ReauthRequired(server_message(&response)));
            }
            StatusCode::UNAUTHORIZED => {
                return Err(WalletError::ApiKeyRejected(server_message(&response)));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                return Err(WalletError::RateLimited {
                    retry_after_secs: retry_after_secs(&response),
                });
            }
            status => {
                return Err(WalletError::Protocol(format!(
                    "token exchange answered {status}: {}",
                    server_message(&response)
                )));
            }
        }
        let exchanged: Exchanged = serde_json::from_slice(response.body())
            .map_err(|_| WalletError::Protocol("token exchange: unexpected body".to_owned()))?;
        let scopes = if exchanged.token_scopes.is_empty() {
            exchanged.scope.split(' ').map(str::to_owned).collect()
        } else {
            exchanged.token_scopes
        };
        let mut held = self.lock();
        // Revoked or cleared meanwhile: do not resurrect.
        let credentials = held.as_mut().ok_or(WalletError::NotSignedIn)?;
        credentials.jwt = Some(exchanged.access_token);
        credentials.jwt_expires_at_unix_secs = minted_at.saturating_add(exchanged.expires_in);
        credentials.scopes = scopes;
        credentials.token().ok_or(WalletError::NotSignedIn)
    }

    /// Revokes the PAT on the server with the held SIWE session (refreshed
    /// once if the server refuses it), sending the current JWT as a guard
    /// while it is valid; then forgets everything, so the next
    /// [`valid_token`](Self::valid_token) asks for a new sign-in.
    pub async fn revoke(&self) -> Result<(), WalletError> {
        let credentials = self.credentials().ok_or(WalletError::NotSignedIn)?;
        let path = format!("/api/v2/auth/tokens/{}", credentials.pat_id);
        let guard = credentials
            .jwt
            .as_ref()
            .filter(|_| credentials.jwt_expires_at_unix_secs > self.now_unix_secs());
        let mut response = None;
        if let Some(session) = &credentials.session_cookie {
            let mut headers = vec![(header::COOKIE, session.clone())];
            if let Some(jwt) = guard {
                headers.push((header::AUTHORIZATION, format!("Bearer {jwt}")));
            }
            response = Some(self.request(Method::DELETE, &path, &headers, None).await?);
        }
        let needs_session = response
            .as_ref()
            .is_none_or(|response| response.status() == StatusCode::UNAUTHORIZED);
        if needs_session && let Some(refresh) = &credentials.refresh_cookie {
            let renewed = self
                .request(
                    Method::POST,
                    "/api/v2/auth/session/refresh",
                    &[(header::COOKIE, refresh.clone())],
                    None,
                )
                .await?;
            if renewed.status() == StatusCode::OK
                && let (Some(session), _) = set_cookies(&renewed)
            {
                let headers = [(header::COOKIE, session)];
                response = Some(self.request(Method::DELETE, &path, &headers, None).await?);
            } else {
                response = Some(renewed);
            }
        }
        let response = response.ok_or_else(|| WalletError::RevokeFailed {
            status: 0,
            message: "no SIWE session is held: sign in again to revoke".to_owned(),
        })?;
        match response.status() {
            // 404: no active PAT with that id, so it is revoked already.
            StatusCode::OK | StatusCode::NOT_FOUND => {
                self.clear();
                Ok(())
            }
            status => Err(WalletError::RevokeFailed {
                status: status.as_u16(),
                message: server_message(&response),
            }),
        }
    }

    /// Sends `request` (a path such as `/api/v2/…` or a full URL on the base
    /// URL's server) with `X-API-KEY` and the Bearer JWT.
    ///
    /// Any answer but the following is returned as is: 401 refreshes the JWT
    /// once and retries once (a second 401 is [`WalletError::Unauthorized`];
    /// a refused API key is [`WalletError::ApiKeyRejected`] at once); 403
    /// `insufficient_scope` is [`WalletError::MissingScope`]; 429 waits a
    /// `Retry-After` of at most the configured bound once, else
    /// [`WalletError::RateLimited`].
    pub async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, WalletError> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.to_string();
        let mut headers: Vec<(HeaderName, String)> = parts
            .headers
            .iter()
            .filter(|(name, _)| **name != header::AUTHORIZATION && **name != API_KEY_HEADER)
            .filter_map(|(name, value)| Some((name.clone(), value.to_str().ok()?.to_owned())))
            .collect();
        let base_headers = headers.len();
        let bearer = |token: &WalletToken| format!("Bearer {}", token.access_token);
        headers.push((header::AUTHORIZATION, bearer(&self.valid_token().await?)));
        let body = (!body.is_empty()).then_some(body);
        let mut refreshed = false;
        let mut waited = false;
        loop {
            let response = self
                .request_bytes(parts.method.clone(), &path, &headers, body.clone())
                .await?;
            match response.status() {
                StatusCode::UNAUTHORIZED if is_api_key_refusal(&response) => {
                    return Err(WalletError::ApiKeyRejected(server_message(&response)));
                }
                StatusCode::UNAUTHORIZED if refreshed => {
                    return Err(WalletError::Unauthorized(server_message(&response)));
                }
                StatusCode::UNAUTHORIZED => {
                    refreshed = true;
                    let token = self.refresh().await?;
                    headers.truncate(base_headers);
                    headers.push((header::AUTHORIZATION, bearer(&token)));
                }
                StatusCode::FORBIDDEN => match missing_scope(&response) {
                    Some(scope) => {
                        return Err(WalletError::MissingScope {
                            scope,
                            message: server_message(&response),
                        });
                    }
                    None => return Ok(response),
                },
                StatusCode::TOO_MANY_REQUESTS => {
                    let retry_after_secs = retry_after_secs(&response);
                    match retry_after_secs {
                        Some(secs) if !waited && secs <= self.config.max_retry_after_secs => {
                            waited = true;
                            tokio::time::sleep(Duration::from_secs(secs)).await;
                        }
                        _ => return Err(WalletError::RateLimited { retry_after_secs }),
                    }
                }
                _ => return Ok(response),
            }
        }
    }

    /// One bounded exchange with `X-API-KEY` and a JSON body, if any.
    async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(HeaderName, String)],
        json_body: Option<Value>,
    ) -> Result<Response<Bytes>, WalletError> {
        let mut headers = headers.to_vec();
        let body = json_body.map(|body| {
            headers.push((header::CONTENT_TYPE, "application/json".to_owned()));
            Bytes::from(body.to_string())
        });
        self.request_bytes(method, path, &headers, body).await
    }

    async fn request_bytes(
        &self,
        method: Method,
        path: &str,
        headers: &[(HeaderName, String)],
        body: Option<Bytes>,
    ) -> Result<Response<Bytes>, WalletError> {
        let url = if path.starts_with('/') {
            format!("{}{path}", self.config.base_url)
        } else if path.starts_with(&format!("{}/", self.config.base_url)) {
            path.to_owned()
        } else {
            return Err(WalletError::Config(format!(
                "{path:?} is neither a path nor a URL on {}",
                self.config.base_url
            )));
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(url)
            .header(API_KEY_HEADER, self.config.api_key.clone());
        for (name, value) in headers {
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| WalletError::Config(format!("header {name} is malformed")))?;
            value.set_sensitive(true);
            builder = builder.header(name, value);
        }
        let request = builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|_| WalletError::Config(format!("{path:?} is not a valid request path")))?;
        tokio::time::timeout(self.config.timeout, self.transport.round_trip(request))
            .await
            .map_err(|_| {
                WalletError::Transport(format!("no answer within {:?}", self.config.timeout))
            })?
            .map_err(|error| WalletError::Transport(crate::error_chain(error.as_ref())))
    }
}

/// A sign-in step's answer as `D`, or the refusal.
fn sign_in_step<D: serde::de::DeserializeOwned>(
    response: &Response<Bytes>,
    expected: StatusCode,
    step: &str,
) -> Result<D, WalletError> {
    if response.status() != expected {
        if response.status() == StatusCode::UNAUTHORIZED && is_api_key_refusal(response) {
            return Err(WalletError::ApiKeyRejected(server_message(response)));
        }
        return Err(WalletError::SignInRefused {
            status: response.status().as_u16(),
            message: server_message(response),
        });
    }
    serde_json::from_slice(response.body())
        .map_err(|_| WalletError::Protocol(format!("{step}: unexpected body")))
}

/// The `access_token` and `refresh_token` cookies set by `response`, as
/// `name=value` for a `Cookie` header (a cleared cookie counts as none).
fn set_cookies(response: &Response<Bytes>) -> (Option<String>, Option<String>) {
    let mut session = None;
    let mut refresh = None;
    for value in response.headers().get_all(header::SET_COOKIE) {
        let Some(pair) = value.to_str().ok().and_then(|v| v.split(';').next()) else {
            continue;
        };
        let Some((name, cookie_value)) = pair.trim().split_once('=') else {
            continue;
        };
        let slot = match name {
            SESSION_COOKIE => &mut session,
            REFRESH_COOKIE => &mut refresh,
            _ => continue,
        };
        *slot = (!cookie_value.is_empty()).then(|| pair.trim().to_owned());
    }
    (session, refresh)
}

fn www_authenticate(response: &Response<Bytes>) -> &str {
    response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// A 401 about the API key rather than the JWT or PAT: an `ApiKey`
/// challenge whose message names the key (walletgate's `tokens` answer a
/// refused PAT with the same challenge).
fn is_api_key_refusal(response: &Response<Bytes>) -> bool {
    let message = server_message(response).to_ascii_lowercase();
    www_authenticate(response)
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("apikey")
        && (message.contains("api key") || message.contains("x-api-key"))
}

/// The `scope` of a `Bearer error="insufficient_scope", scope="…"` challenge.
fn missing_scope(response: &Response<Bytes>) -> Option<String> {
    let challenge = www_authenticate(response);
    if !challenge.contains("insufficient_scope") {
        return None;
    }
    let scope = challenge
        .split_once("scope=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("(unnamed)", |(scope, _)| scope);
    Some(scope.to_owned())
}

/// `Retry-After` in seconds (the HTTP-date form is not used by walletgate).
fn retry_after_secs(response: &Response<Bytes>) -> Option<u64> {
    response
        .headers()
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The server's error message: Area A's `error.message`, a JSON-RPC
/// `error.message`, or the status; at most 300 characters.
fn server_message(response: &Response<Bytes>) -> String {
    let parsed: Option<Value> = serde_json::from_slice(response.body()).ok();
    let message = parsed
        .as_ref()
        .and_then(|body| body["error"]["message"].as_str())
        .map_or_else(
            || {
                response
                    .status()
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_owned()
            },
            str::to_owned,
        );
    message.chars().take(300).collect()
}
