//! [`JwksUrl`]: an external issuer's keys, fetched from its JWKS URL.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri, header::ACCEPT};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::TokioExecutor;

use super::{ConfigError, KeySet};

type FetchFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;
type Fetcher = Arc<dyn Fn() -> FetchFuture + Send + Sync>;

/// The keys of an external issuer, fetched from its JWKS URL (RFC 7517):
/// fetched on first use (or [`refresh`](Self::refresh) at start), refreshed
/// every 10 minutes by default, and refreshed early when a token names a
/// `kid` the set lacks, at most once per 30 s by default, so a flood of
/// forged kids costs the issuer one request per interval. When the issuer
/// is down the last good set keeps serving. Keys of types walletgate does
/// not verify with are skipped; RS256, ES256 and EdDSA keys are loaded.
///
/// Refreshes happen on the request path of the request that finds one due
/// (bounded by the fetch timeout, 5 s by default); times come from the
/// verifier's clock, so tests advance a fake clock instead of sleeping.
///
/// Clones share the keys and the refresh state.
#[derive(Clone)]
pub struct JwksUrl {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    keys: KeySet,
    fetch: Fetcher,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    refresh_every_secs: u64,
    unknown_kid_every_secs: u64,
    /// When the last fetch was started and when one last succeeded.
    last_attempt_at: Option<u64>,
    last_success_at: Option<u64>,
    fetches: u64,
}

impl JwksUrl {
    /// Default refresh interval: 10 minutes.
    pub const DEFAULT_REFRESH_SECS: u64 = 600;
    /// Default shortest time between two fetches: 30 s.
    pub const DEFAULT_UNKNOWN_KID_SECS: u64 = 30;
    /// Default bound on one fetch, connection included.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Largest JWKS document read, in bytes.
    pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

    /// The JWKS at `url` (`http://…`; `https://` needs [`with_tls`](Self::new_with_tls)).
    ///
    /// # Errors
    /// [`ConfigError::InvalidJwksUrl`].
    pub fn new(url: &str) -> Result<Self, ConfigError> {
        if !url.starts_with("http://") {
            return Err(ConfigError::InvalidJwksUrl(format!(
                "{url} (new speaks plain http; for https use with_tls, feature rustls)"
            )));
        }
        Self::new_with_connector(url, HttpConnector::new())
    }

    /// The JWKS at `url` (`https://…` or `http://…`), trusting the roots of `tls`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidJwksUrl`], also for a TLS setting that fails.
    #[cfg(feature = "rustls")]
    pub fn new_with_tls(url: &str, tls: &crate::tls::ClientTls) -> Result<Self, ConfigError> {
        let connector = tls
            .https_connector()
            .map_err(|error| ConfigError::InvalidJwksUrl(format!("{url}: {error:?}")))?;
        Self::new_with_connector(url, connector)
    }

    /// The JWKS at `url` through `connector`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidJwksUrl`].
    pub fn new_with_connector<C>(url: &str, connector: C) -> Result<Self, ConfigError>
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        let uri: Uri = url
            .parse()
            .map_err(|_| ConfigError::InvalidJwksUrl(url.to_owned()))?;
        if uri.scheme().is_none() || uri.authority().is_none() {
            return Err(ConfigError::InvalidJwksUrl(url.to_owned()));
        }
        let client: Client<C, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self::with_fetcher(
            url,
            http_fetcher(client, uri, Self::DEFAULT_TIMEOUT),
        ))
    }

    fn with_fetcher(url: &str, fetch: Fetcher) -> Self {
        Self {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                keys: KeySet::new(),
                fetch,
                state: Mutex::new(State {
                    refresh_every_secs: Self::DEFAULT_REFRESH_SECS,
                    unknown_kid_every_secs: Self::DEFAULT_UNKNOWN_KID_SECS,
                    last_attempt_at: None,
                    last_success_at: None,
                    fetches: 0,
                }),
            }),
        }
    }

    /// Refreshes the set every `secs` (default 10 minutes).
    #[must_use]
    pub fn with_refresh_every_secs(self, secs: u64) -> Self {
        self.lock().refresh_every_secs = secs;
        self
    }

    /// Fetches at most once per `secs` (default 30 s), whatever the reason:
    /// an unknown `kid`, a due refresh, an issuer that is down.
    #[must_use]
    pub fn with_unknown_kid_every_secs(self, secs: u64) -> Self {
        self.lock().unknown_kid_every_secs = secs;
        self
    }

    /// The keys fetched so far (empty before the first fetch).
    pub fn keys(&self) -> &KeySet {
        &self.inner.keys
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// How many fetches were started.
    pub fn fetch_count(&self) -> u64 {
        self.lock().fetches
    }

    /// Fetches the set now (at start, so the first request does not wait)
    /// and returns how many keys it holds; on failure the last good set
    /// stays.
    ///
    /// # Errors
    /// [`ConfigError::JwksUnavailable`] when the fetch or the document fails.
    pub async fn refresh(&self, now_unix_secs: u64) -> Result<usize, ConfigError> {
        {
            let mut state = self.lock();
            state.last_attempt_at = Some(now_unix_secs);
            state.fetches += 1;
        }
        self.fetch_and_load(now_unix_secs).await
    }

    /// Fetches when the refresh interval has passed, or when `kid` is not
    /// `known` — in both cases only if the last fetch started at least the
    /// unknown-kid interval ago.
    pub(crate) async fn refresh_if_due(&self, _kid: &str, known: bool, now: u64) {
        let due = {
            let mut state = self.lock();
            let stale = state
                .last_success_at
                .is_none_or(|at| now >= at.saturating_add(state.refresh_every_secs));
            let spaced = state
                .last_attempt_at
                .is_none_or(|at| now >= at.saturating_add(state.unknown_kid_every_secs));
            let due = spaced && (stale || !known);
            if due {
                state.last_attempt_at = Some(now);
                state.fetches += 1;
            }
            due
        };
        if due && let Err(_error) = self.fetch_and_load(now).await {
            trace_warn!(url = %self.inner.url, error = %_error, "JWKS refresh failed; keeping the last good key set");
        }
    }

    async fn fetch_and_load(&self, now: u64) -> Result<usize, ConfigError> {
        let document = (self.inner.fetch)()
            .await
            .map_err(ConfigError::JwksUnavailable)?;
        let count = self.inner.keys.replace_from_jwks(&document)?;
        self.lock().last_success_at = Some(now);
        Ok(count)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn http_fetcher<C>(client: Client<C, Empty<Bytes>>, uri: Uri, timeout: Duration) -> Fetcher
where
    C: Connect + Clone + Send + Sync + 'static,
{
    Arc::new(move || {
        let (client, uri) = (client.clone(), uri.clone());
        Box::pin(async move {
            let request = Request::get(uri)
                .header(ACCEPT, "application/json")
                .body(Empty::new())
                .map_err(|error| error.to_string())?;
            let read = async {
                let response = client
                    .request(request)
                    .await
                    .map_err(|error| error.to_string())?;
                if !response.status().is_success() {
                    return Err(format!("status {}", response.status()));
                }
                let body = Limited::new(response.into_body(), JwksUrl::MAX_DOCUMENT_BYTES)
                    .collect()
                    .await
                    .map_err(|error| error.to_string())?;
                String::from_utf8(body.to_bytes().to_vec())
                    .map_err(|_| "document is not UTF-8".to_owned())
            };
            tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| "timed out".to_owned())?
        }) as FetchFuture
    })
}

impl fmt::Debug for JwksUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwksUrl")
            .field("url", &self.inner.url)
            .field("keys", &self.inner.keys)
            .field("state", &*self.lock())
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::clock::FakeClock;
    use crate::wallet_jwt::{JwtError, JwtVerifier, VerificationKey};

    const ISSUER: &str = "https://idp.test";
    const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const NOW: u64 = 1_800_000_000;

    /// A JWKS source answering `document()` (or failing while `down`), counting fetches.
    pub(crate) fn fake(
        document: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> (JwksUrl, Arc<AtomicU64>) {
        let served = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&served);
        let document = Arc::new(document);
        let fetch: Fetcher = Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let answer = document().ok_or_else(|| "connection refused".to_owned());
            Box::pin(async move { answer }) as FetchFuture
        });
        (JwksUrl::with_fetcher("http://idp.test/jwks", fetch), served)
    }

    fn signing_key() -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[0x44; 32])
    }

    fn jwks() -> String {
        let keys = KeySet::new();
        keys.insert(
            "idp-1",
            VerificationKey::ed25519(signing_key().verifying_key()),
        )
        .unwrap();
        keys.to_jwks().to_string()
    }

    fn token(kid: &str) -> String {
        let claims = serde_json::json!({
            "iss": ISSUER, "aud": ["api"], "sub": "3141592653", "exp": NOW + 600,
            "iat": NOW, "linked_wallets": [WALLET], "opensea_scopes": "read:favorites",
        });
        crate::wallet_jwt::jwt::encode(
            &crate::wallet_jwt::jwt::Header {
                alg: "EdDSA".into(),
                typ: Some("JWT".into()),
                kid: Some(kid.into()),
                crit: None,
            },
            &claims,
            |input| {
                use ed25519_dalek::Signer as _;
                signing_key().sign(input).to_bytes().to_vec()
            },
        )
        .unwrap()
    }

    fn verifier(jwks: JwksUrl, clock: &FakeClock) -> JwtVerifier {
        JwtVerifier::from_jwks_url(jwks, ISSUER, "api")
            .unwrap()
            .with_scopes_claim("opensea_scopes")
            .with_wallet_claim("linked_wallets")
            .with_clock(Arc::new(clock.clone()))
    }

    #[tokio::test]
    async fn the_first_token_fetches_the_set_and_later_ones_reuse_it() {
        let clock = FakeClock::at_unix_secs(NOW);
        let (jwks, served) = fake(|| Some(jwks()));
        let verifier = verifier(jwks, &clock);
        for _ in 0..3 {
            let claims = verifier.authenticate(&token("idp-1")).await.unwrap();
            assert_eq!(claims.wallet().to_string(), WALLET);
        }
        assert_eq!(served.load(Ordering::SeqCst), 1);
        clock.advance(Duration::from_secs(JwksUrl::DEFAULT_REFRESH_SECS));
        verifier.authenticate(&token("idp-1")).await.unwrap();
        assert_eq!(
            served.load(Ordering::SeqCst),
            2,
            "refreshed after 10 minutes"
        );
    }

    #[tokio::test]
    async fn a_flood_of_unknown_kids_fetches_once_per_interval() {
        let clock = FakeClock::at_unix_secs(NOW);
        let (jwks, served) = fake(|| Some(jwks()));
        let verifier = verifier(jwks, &clock);
        for i in 0..100 {
            let refused = verifier.authenticate(&token(&format!("forged-{i}"))).await;
            assert_eq!(refused, Err(JwtError::UnknownKey));
        }
        assert_eq!(served.load(Ordering::SeqCst), 1);
        clock.advance(Duration::from_secs(JwksUrl::DEFAULT_UNKNOWN_KID_SECS));
        for i in 0..100 {
            let _ = verifier.authenticate(&token(&format!("again-{i}"))).await;
        }
        assert_eq!(served.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn the_last_good_set_serves_while_the_issuer_is_down() {
        let clock = FakeClock::at_unix_secs(NOW);
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = Arc::clone(&up);
        let (jwks, served) = fake(move || flag.load(Ordering::SeqCst).then(jwks));
        let verifier = verifier(jwks, &clock);
        verifier.authenticate(&token("idp-1")).await.unwrap();
        up.store(false, Ordering::SeqCst);
        clock.advance(Duration::from_secs(JwksUrl::DEFAULT_REFRESH_SECS));
        verifier.authenticate(&token("idp-1")).await.unwrap();
        assert_eq!(served.load(Ordering::SeqCst), 2, "the refresh was tried");
    }
}
