//! The SIWE session on the wire: its two cookies, the [`SessionWallet`]
//! extractor, which owns the rule "PAT management needs a SIWE session; a
//! bearer JWT cannot do it", and [`refuse_cross_site`], which keeps other
//! sites' pages from using the session.
//!
//! Cross-site requests are refused twice over: the cookies are
//! `SameSite=Strict` (a browser sends them only from the server's own
//! pages), and a request a browser marks as coming from another site
//! (`Sec-Fetch-Site: cross-site` or `same-site`, or an `Origin` that is not
//! the issuer's) is refused with 403 before its cookies are read, so a
//! forged form post gets a clear answer instead of "sign in first".
//! Programs (the SDK, the CLI) send neither header and pass.

use std::sync::Arc;

use alloy_primitives::Address;
use axum_core::extract::FromRequestParts;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, header};

use super::{IssuerConfig, PatStore, SessionCookies, SessionStore, TokenIssuer};
use crate::envelope::DataApiError;
use crate::wallet_jwt::WalletClaims;

/// The session cookie's name: it authorises PAT management.
pub const ACCESS_COOKIE: &str = "access_token";
/// The refresh cookie's name: it buys new session cookies, once.
pub const REFRESH_COOKIE: &str = "refresh_token";

/// The value of cookie `name` in the request's `Cookie` headers, if any.
pub fn request_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// One `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, `Path=/`, and `Secure`
/// when the issuer's origin is `https://`.
fn set_cookie(name: &str, value: &str, max_age_secs: u64, config: &IssuerConfig) -> HeaderValue {
    let secure = if config.issuer().starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let text = format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    );
    // Cookie values are base62 (or empty), so the header is always valid.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Refuses (403) a request a browser sent from a page of another origin:
/// `Sec-Fetch-Site` other than `same-origin` or `none`, or an `Origin` other
/// than `origin` (the issuer's, as [`IssuerConfig::issuer`] names it). A
/// request with neither header (a program, not a browser) passes.
///
/// [`SessionWallet`] applies it to every request it authorises; call it in
/// the handlers that set or rotate the session cookies (sign-in, refresh,
/// sign-out), which a forged request could otherwise drive.
///
/// # Errors
/// A [`DataApiError`] with status 403 naming the header that gave the request away.
///
/// ```
/// use http::HeaderMap;
/// use walletgate::tokens::refuse_cross_site;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("origin", "https://evil.example".parse().unwrap());
/// let refused = refuse_cross_site(&headers, "https://api.example").unwrap_err();
/// assert_eq!(refused.status(), 403);
/// assert!(refuse_cross_site(&HeaderMap::new(), "https://api.example").is_ok());
/// ```
pub fn refuse_cross_site(headers: &HeaderMap, origin: &str) -> Result<(), DataApiError> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|value| value.to_str().unwrap_or_default());
    if fetch_site.is_some_and(|site| site != "same-origin" && site != "none") {
        return Err(DataApiError::forbidden(
            "cross-site request refused: sign-in and token management answer only this \
             server's own pages (Sec-Fetch-Site is not same-origin)",
        ));
    }
    let request_origin = headers.get(header::ORIGIN).map(HeaderValue::as_bytes);
    if request_origin.is_some_and(|sent| sent != origin.trim_end_matches('/').as_bytes()) {
        return Err(DataApiError::forbidden(
            "cross-site request refused: sign-in and token management answer only this \
             server's own pages (the Origin header names another origin)",
        ));
    }
    Ok(())
}

impl SessionCookies {
    /// The two `Set-Cookie` headers that hand the session to the browser,
    /// each living as long as `config` lets it.
    pub fn set_cookie_headers(&self, config: &IssuerConfig) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.append(
            header::SET_COOKIE,
            set_cookie(
                ACCESS_COOKIE,
                &self.access,
                config.session_lifetime_secs(),
                config,
            ),
        );
        headers.append(
            header::SET_COOKIE,
            set_cookie(
                REFRESH_COOKIE,
                &self.refresh,
                config.refresh_lifetime_secs(),
                config,
            ),
        );
        headers
    }

    /// The two `Set-Cookie` headers that sign the browser out (empty, `Max-Age=0`).
    pub fn cleared_headers(config: &IssuerConfig) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for name in [ACCESS_COOKIE, REFRESH_COOKIE] {
            headers.append(header::SET_COOKIE, set_cookie(name, "", 0, config));
        }
        headers
    }
}

/// A router state that knows the sessions: the [`TokenIssuer`] itself, an
/// `Arc` of one, or your state handing out its issuer.
pub trait HasTokenIssuer: Send + Sync {
    /// The issuer's PAT store.
    type Pats: PatStore;
    /// The issuer's session store.
    type Sessions: SessionStore;

    /// The issuer that started the sessions.
    fn token_issuer(&self) -> &TokenIssuer<Self::Pats, Self::Sessions>;
}

impl<P: PatStore, S: SessionStore> HasTokenIssuer for TokenIssuer<P, S> {
    type Pats = P;
    type Sessions = S;

    fn token_issuer(&self) -> &TokenIssuer<P, S> {
        self
    }
}

impl<T: HasTokenIssuer> HasTokenIssuer for Arc<T> {
    type Pats = T::Pats;
    type Sessions = T::Sessions;

    fn token_issuer(&self) -> &TokenIssuer<T::Pats, T::Sessions> {
        (**self).token_issuer()
    }
}

/// The wallet of the request's SIWE session (cookie `access_token`): the
/// extractor of every PAT management handler.
///
/// A verified bearer JWT, if the request carried one, never stands in for the
/// session; it only sharpens the refusal (401 in the Area A envelope).
///
/// ```
/// use walletgate::tokens::SessionWallet;
///
/// async fn list_tokens(SessionWallet(wallet): SessionWallet) -> String {
///     wallet.to_checksum(None)
/// }
/// # let _ = list_tokens;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionWallet(pub Address);

impl<St: HasTokenIssuer> FromRequestParts<St> for SessionWallet {
    type Rejection = DataApiError;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Self, Self::Rejection> {
        refuse_cross_site(&parts.headers, state.token_issuer().config().issuer())?;
        let Some(access) = request_cookie(&parts.headers, ACCESS_COOKIE) else {
            let message = if parts.extensions.get::<WalletClaims>().is_some() {
                "token management needs the SIWE session cookie; a bearer JWT cannot manage tokens"
            } else {
                "token management needs the SIWE session cookie (sign in with SIWE first)"
            };
            return Err(DataApiError::unauthorized(message));
        };
        let wallet = state.token_issuer().session_wallet(access).await?;
        Ok(Self(wallet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::tokens::SigningKeys;
    use crate::wallet_jwt::KeySet;

    const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

    fn issuer(origin: &str) -> TokenIssuer {
        let config = IssuerConfig::new(origin, origin).unwrap();
        TokenIssuer::in_memory(config, SigningKeys::generate(KeySet::new()).unwrap())
            .with_clock(Arc::new(FakeClock::at_unix_secs(1_800_000_000)))
    }

    async fn extract(
        issuer: &TokenIssuer,
        request: http::Request<()>,
    ) -> Result<SessionWallet, DataApiError> {
        let (mut parts, ()) = request.into_parts();
        SessionWallet::from_request_parts(&mut parts, &Arc::new(issuer.clone())).await
    }

    fn with_cookie(value: &str) -> http::Request<()> {
        http::Request::builder()
            .header(header::COOKIE, value)
            .body(())
            .unwrap()
    }

    #[test]
    fn reads_one_cookie_among_several_headers() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        headers.append(header::COOKIE, HeaderValue::from_static("access_token=xyz"));
        assert_eq!(request_cookie(&headers, "b"), Some("2"));
        assert_eq!(request_cookie(&headers, ACCESS_COOKIE), Some("xyz"));
        assert_eq!(request_cookie(&headers, REFRESH_COOKIE), None);
    }

    #[tokio::test]
    async fn a_started_session_names_its_wallet() {
        let issuer = issuer("http://127.0.0.1:8080");
        let wallet: Address = WALLET.parse().unwrap();
        let cookies = issuer.start_session(wallet).await.unwrap();
        let request = with_cookie(&format!("theme=dark; {ACCESS_COOKIE}={}", cookies.access));
        assert_eq!(
            extract(&issuer, request).await.unwrap(),
            SessionWallet(wallet)
        );
    }

    #[tokio::test]
    async fn an_unknown_session_is_401() {
        let issuer = issuer("http://127.0.0.1:8080");
        let error = extract(&issuer, with_cookie("access_token=forged"))
            .await
            .unwrap_err();
        assert_eq!(error.status(), 401);
    }

    #[tokio::test]
    async fn a_bearer_jwt_never_stands_in_for_the_session() {
        let issuer = issuer("http://127.0.0.1:8080");
        let error = extract(&issuer, http::Request::new(())).await.unwrap_err();
        assert_eq!(error.status(), 401);
        assert!(error.message().contains("sign in with SIWE first"));

        let mut request = http::Request::new(());
        let scopes = "read:favorites".parse().unwrap();
        let claims = WalletClaims::new(
            WALLET.parse().unwrap(),
            scopes,
            "jti".into(),
            "pat".into(),
            1,
            2,
        );
        request.extensions_mut().insert(claims);
        let error = extract(&issuer, request).await.unwrap_err();
        assert_eq!(error.status(), 401);
        assert!(
            error
                .message()
                .contains("a bearer JWT cannot manage tokens")
        );
    }

    #[tokio::test]
    async fn a_cross_site_request_is_refused_before_its_cookie_is_read() {
        let issuer = issuer("http://127.0.0.1:8080");
        let wallet: Address = WALLET.parse().unwrap();
        let cookies = issuer.start_session(wallet).await.unwrap();
        let cookie = format!("{ACCESS_COOKIE}={}", cookies.access);
        for (name, value, why) in [
            ("sec-fetch-site", "cross-site", "Sec-Fetch-Site"),
            ("sec-fetch-site", "same-site", "Sec-Fetch-Site"),
            ("origin", "http://evil.example", "Origin"),
            ("origin", "null", "Origin"),
        ] {
            let mut request = with_cookie(&cookie);
            request
                .headers_mut()
                .insert(name, HeaderValue::from_static(value));
            let error = extract(&issuer, request).await.unwrap_err();
            assert_eq!(error.status(), 403, "{name}: {value}");
            assert!(error.message().contains(why), "{}", error.message());
        }
        // The server's own page, and programs that send neither header.
        for (name, value) in [
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-site", "none"),
            ("origin", "http://127.0.0.1:8080"),
        ] {
            let mut request = with_cookie(&cookie);
            request
                .headers_mut()
                .insert(name, HeaderValue::from_static(value));
            assert_eq!(
                extract(&issuer, request).await.unwrap(),
                SessionWallet(wallet)
            );
        }
    }

    #[tokio::test]
    async fn cookies_are_http_only_and_secure_on_https() {
        let wallet: Address = WALLET.parse().unwrap();
        let plain = issuer("http://127.0.0.1:8080");
        let cookies = plain.start_session(wallet).await.unwrap();
        let headers = cookies.set_cookie_headers(plain.config());
        let values: Vec<&str> = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|value| value.to_str().unwrap())
            .collect();
        assert_eq!(values.len(), 2);
        assert!(values[0].starts_with("access_token="));
        assert!(values[1].starts_with("refresh_token="));
        assert!(
            values
                .iter()
                .all(|value| value.contains("HttpOnly; SameSite=Strict"))
        );
        assert!(values.iter().all(|value| !value.contains("Secure")));

        let tls = issuer("https://api.example");
        let cleared = SessionCookies::cleared_headers(tls.config());
        for value in cleared.get_all(header::SET_COOKIE) {
            let value = value.to_str().unwrap();
            assert!(value.contains("=; Path=/") && value.ends_with("Max-Age=0; Secure"));
        }
    }
}
