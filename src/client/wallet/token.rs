//! The wallet JWT handed to callers, and the credentials a client holds.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A wallet JWT, as [`WalletAuth::valid_token`](super::WalletAuth::valid_token)
/// returns it. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalletToken {
    /// The JWT, for `Authorization: Bearer …`.
    pub access_token: String,
    /// When it expires (by the client's clock: issue time + `expiresIn`).
    pub expires_at: SystemTime,
    /// The scopes it grants.
    pub scopes: Vec<String>,
}

impl fmt::Debug for WalletToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletToken")
            .field("access_token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Everything a signed-in client holds: the wallet, the PAT, the current JWT
/// and the SIWE session cookies (needed to revoke the PAT).
///
/// Serialisable so a command-line client can keep it between runs (in a file
/// only its owner can read); `Debug` redacts every secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    pub(crate) base_url: String,
    pub(crate) address: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) pat_id: String,
    pub(crate) pat: String,
    pub(crate) pat_expires_at_unix_secs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jwt: Option<String>,
    #[serde(default)]
    pub(crate) jwt_expires_at_unix_secs: u64,
    /// `access_token=…` (the session), as sent in `Cookie`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session_cookie: Option<String>,
    /// `refresh_token=…`, which buys a new session once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refresh_cookie: Option<String>,
}

impl Credentials {
    /// The server these credentials belong to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The signed-in wallet (checksummed).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The PAT's scopes.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// The PAT's id (not a secret: it names the PAT in management calls).
    pub fn pat_id(&self) -> &str {
        &self.pat_id
    }

    /// When the PAT expires.
    pub fn pat_expires_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.pat_expires_at_unix_secs)
    }

    /// When the held JWT expires, if one is held.
    pub fn jwt_expires_at(&self) -> Option<SystemTime> {
        self.jwt
            .as_ref()
            .map(|_| UNIX_EPOCH + Duration::from_secs(self.jwt_expires_at_unix_secs))
    }

    /// Every secret held, for callers that must prove none leaked (tests,
    /// log scrubbing): the PAT, the JWT and the cookie values.
    pub fn secrets(&self) -> Vec<&str> {
        fn cookie_value(cookie: &Option<String>) -> Option<&str> {
            cookie
                .as_deref()
                .map(|cookie| cookie.split_once('=').map_or(cookie, |(_, value)| value))
        }
        [
            Some(self.pat.as_str()),
            self.jwt.as_deref(),
            cookie_value(&self.session_cookie),
            cookie_value(&self.refresh_cookie),
        ]
        .into_iter()
        .flatten()
        .filter(|secret| !secret.is_empty())
        .collect()
    }

    pub(crate) fn token(&self) -> Option<WalletToken> {
        self.jwt.as_ref().map(|jwt| WalletToken {
            access_token: jwt.clone(),
            expires_at: UNIX_EPOCH + Duration::from_secs(self.jwt_expires_at_unix_secs),
            scopes: self.scopes.clone(),
        })
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = |present: bool| if present { "[redacted]" } else { "none" };
        f.debug_struct("Credentials")
            .field("base_url", &self.base_url)
            .field("address", &self.address)
            .field("scopes", &self.scopes)
            .field("pat_id", &self.pat_id)
            .field("pat", &"[redacted]")
            .field("pat_expires_at_unix_secs", &self.pat_expires_at_unix_secs)
            .field("jwt", &held(self.jwt.is_some()))
            .field("jwt_expires_at_unix_secs", &self.jwt_expires_at_unix_secs)
            .field("session_cookie", &held(self.session_cookie.is_some()))
            .field("refresh_cookie", &held(self.refresh_cookie.is_some()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> Credentials {
        Credentials {
            base_url: "http://127.0.0.1:1".to_owned(),
            address: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".to_owned(),
            scopes: vec!["read:favorites".to_owned()],
            pat_id: "pat_1".to_owned(),
            pat: "wg_pat_secretvalue".to_owned(),
            pat_expires_at_unix_secs: 2_000,
            jwt: Some("eyJ.secret.jwt".to_owned()),
            jwt_expires_at_unix_secs: 1_000,
            session_cookie: Some("access_token=sessionsecret".to_owned()),
            refresh_cookie: Some("refresh_token=refreshsecret".to_owned()),
        }
    }

    #[test]
    fn debug_redacts_every_secret() {
        let credentials = held();
        let token = credentials.token().unwrap();
        let shown = format!("{credentials:?} {token:?}");
        assert_eq!(
            credentials.secrets(),
            [
                "wg_pat_secretvalue",
                "eyJ.secret.jwt",
                "sessionsecret",
                "refreshsecret"
            ]
        );
        for secret in credentials.secrets() {
            assert!(!shown.contains(secret), "{secret} leaked in {shown}");
        }
        assert!(shown.contains("read:favorites") && shown.contains("pat_1"));
    }

    #[test]
    fn round_trips_through_json() {
        let credentials = held();
        let json = serde_json::to_string(&credentials).unwrap();
        assert!(json.contains("\"patExpiresAtUnixSecs\":2000"), "{json}");
        let back: Credentials = serde_json::from_str(&json).unwrap();
        assert_eq!(back, credentials);
    }
}
