//! `WalletAuth` against a scripted in-process server (a tower `service_fn`
//! that counts what it is asked), on a fake clock: no sockets, no sleeps.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use http_body_util::BodyExt;
use serde_json::Value;
use tower_service::Service;

use super::*;
use crate::clock::FakeClock;
use crate::envelope::DataApiError;

/// Public Hardhat/Anvil development key #0.
const DEV_KEY_0: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const DEV_WALLET_0: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const BASE: &str = "http://127.0.0.1:9";
const API_KEY: &str = "unit-test-api-key";
const START: u64 = 1_800_000_000;
const JWT_LIFETIME_SECS: u64 = 900;
const DATA: &str = "/api/v2/data";

/// What the fake server saw and will answer.
#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    mints: AtomicUsize,
    data_calls: AtomicUsize,
    revokes: AtomicUsize,
    pat_revoked: AtomicBool,
    /// Answers for `DATA`, first first; 200 when empty.
    script: Mutex<VecDeque<Response<Bytes>>>,
    /// The `Authorization` of each `DATA` call.
    bearers: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct Fake {
    clock: FakeClock,
    seen: Arc<Seen>,
}

fn json_response(status: StatusCode, body: Value) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response
}

fn rfc3339(unix_secs: u64) -> String {
    Timestamp::from_unix_millis(i64::try_from(unix_secs * 1000).unwrap()).to_string()
}

impl Fake {
    fn new() -> Self {
        Self {
            clock: FakeClock::at_unix_secs(START),
            seen: Arc::new(Seen::default()),
        }
    }

    fn script(&self, responses: impl IntoIterator<Item = Response<Bytes>>) {
        self.seen.script.lock().unwrap().extend(responses);
    }

    fn count(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        Self::count(&self.seen.requests)
    }

    fn mints(&self) -> usize {
        Self::count(&self.seen.mints)
    }

    fn data_calls(&self) -> usize {
        Self::count(&self.seen.data_calls)
    }

    fn answer(&self, request: Request<Bytes>) -> Response<Bytes> {
        self.seen.requests.fetch_add(1, Ordering::SeqCst);
        if request.headers()["x-api-key"] != API_KEY {
            return DataApiError::unauthorized("Invalid or revoked API key").into_response();
        }
        let header = |name: header::HeaderName| {
            request
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        let body: Value = serde_json::from_slice(request.body()).unwrap_or(Value::Null);
        match (request.method().as_str(), request.uri().path()) {
            ("POST", "/api/v2/auth/siwe/nonce") => {
                json_response(StatusCode::OK, json!({"nonce": "n0nce0123456789ab"}))
            }
            ("POST", "/api/v2/auth/siwe/verify") => {
                let fields: SiweMessageFields =
                    serde_json::from_value(body["message"].clone()).unwrap();
                assert_eq!(fields.domain, "127.0.0.1:9");
                assert_eq!(fields.uri, BASE);
                assert_eq!(fields.nonce, "n0nce0123456789ab");
                assert_eq!(fields.issued_at, rfc3339(START));
                let text = SiweMessage::from_fields(&fields).unwrap().to_string();
                let signature =
                    alloy_primitives::Signature::from_str(body["signature"].as_str().unwrap())
                        .unwrap();
                let signer = signature.recover_address_from_msg(text.as_bytes()).unwrap();
                assert_eq!(signer.to_checksum(None), fields.address);
                let mut response =
                    json_response(StatusCode::OK, json!({"address": signer.to_checksum(None)}));
                for cookie in [
                    "access_token=s3ssion; HttpOnly",
                    "refresh_token=r3fresh; HttpOnly",
                ] {
                    response
                        .headers_mut()
                        .append(header::SET_COOKIE, HeaderValue::from_static(cookie));
                }
                response
            }
            ("POST", "/api/v2/auth/tokens") => {
                assert_eq!(header(header::COOKIE), "access_token=s3ssion");
                let now = crate::clock::Clock::now_unix_secs(&self.clock);
                json_response(
                    StatusCode::CREATED,
                    json!({"id": "pat_1", "token": "wg_pat_s3cret", "label": body["label"],
                           "scopes": body["scopes"], "expiresAt": rfc3339(now + 86_400)}),
                )
            }
            ("POST", "/api/v2/auth/tokens/exchange") => {
                assert_eq!(body["subjectToken"], "wg_pat_s3cret");
                let mints = self.seen.mints.fetch_add(1, Ordering::SeqCst) + 1;
                if self.seen.pat_revoked.load(Ordering::SeqCst) {
                    // What walletgate's tokens answer (an ApiKey challenge too).
                    return DataApiError::unauthorized(
                        "the personal access token was revoked; sign in again",
                    )
                    .into_response();
                }
                json_response(
                    StatusCode::OK,
                    json!({"accessToken": format!("jwt-{mints}"), "tokenType": "Bearer",
                           "expiresIn": JWT_LIFETIME_SECS, "scope": "read:favorites",
                           "tokenScopes": ["read:favorites"]}),
                )
            }
            ("DELETE", "/api/v2/auth/tokens/pat_1") => {
                assert_eq!(header(header::COOKIE), "access_token=s3ssion");
                self.seen.revokes.fetch_add(1, Ordering::SeqCst);
                self.seen.pat_revoked.store(true, Ordering::SeqCst);
                json_response(StatusCode::OK, json!({"id": "pat_1", "revoked": true}))
            }
            ("GET", DATA) => {
                self.seen.data_calls.fetch_add(1, Ordering::SeqCst);
                self.seen
                    .bearers
                    .lock()
                    .unwrap()
                    .push(header(header::AUTHORIZATION));
                let scripted = self.seen.script.lock().unwrap().pop_front();
                scripted.unwrap_or_else(|| json_response(StatusCode::OK, json!({"ok": true})))
            }
            _ => DataApiError::not_found("no such route").into_response(),
        }
    }

    fn transport(&self) -> FakeTransport {
        FakeTransport(self.clone())
    }

    fn client(&self) -> WalletAuth<FakeTransport> {
        let config = WalletConfig::new(BASE, API_KEY).unwrap();
        WalletAuth::new_with_transport(config, self.transport())
            .with_clock(Arc::new(self.clock.clone()))
    }
}

/// The fake server as a tower `Service`, as a real transport is one.
#[derive(Clone)]
struct FakeTransport(Fake);

impl Service<Request<Full<Bytes>>> for FakeTransport {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Self::Future {
        let fake = self.0.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.unwrap_or_default().to_bytes();
            let response = fake.answer(Request::from_parts(parts, body));
            Ok(response.map(Full::new))
        })
    }
}

fn signer() -> alloy_signer_local::PrivateKeySigner {
    DEV_KEY_0.parse().unwrap()
}

fn data_request() -> Request<Bytes> {
    Request::get(DATA).body(Bytes::new()).unwrap()
}

/// A signed-in client and its server.
async fn signed_in() -> (Fake, WalletAuth<FakeTransport>) {
    let fake = Fake::new();
    let auth = fake.client();
    auth.authenticate(&signer(), &["read:favorites"])
        .await
        .unwrap();
    assert_eq!(fake.mints(), 1);
    (fake, auth)
}

#[tokio::test]
async fn authenticate_signs_in_with_siwe_creates_a_pat_and_mints_a_jwt() {
    let fake = Fake::new();
    let auth = fake.client();
    let token = auth
        .authenticate(&signer(), &["read:favorites"])
        .await
        .unwrap();
    assert_eq!(token.access_token, "jwt-1");
    assert_eq!(token.scopes, ["read:favorites"]);
    assert_eq!(
        token.expires_at,
        UNIX_EPOCH + Duration::from_secs(START + JWT_LIFETIME_SECS)
    );
    // nonce, verify, PAT creation, exchange.
    assert_eq!(fake.requests(), 4);
    let credentials = auth.credentials().unwrap();
    assert_eq!(credentials.address(), DEV_WALLET_0);
    assert_eq!(credentials.pat_id(), "pat_1");
    assert!(!format!("{auth:?} {token:?}").contains("s3cret"));
}

#[tokio::test]
async fn an_empty_scope_list_is_refused_before_any_request() {
    let fake = Fake::new();
    let auth = fake.client();
    assert_eq!(
        auth.authenticate(&signer(), &[]).await.unwrap_err(),
        WalletError::NoScopes
    );
    assert_eq!(
        auth.authenticate(&signer(), &[" "]).await.unwrap_err(),
        WalletError::NoScopes
    );
    assert_eq!(fake.requests(), 0);
}

#[tokio::test]
async fn valid_token_re_mints_only_within_60_s_of_expiry() {
    let (fake, auth) = signed_in().await;
    fake.clock.advance(Duration::from_secs(
        JWT_LIFETIME_SECS - REFRESH_WINDOW_SECS - 1,
    ));
    assert_eq!(auth.valid_token().await.unwrap().access_token, "jwt-1");
    assert_eq!(fake.mints(), 1);
    fake.clock.advance(Duration::from_secs(2));
    assert_eq!(auth.valid_token().await.unwrap().access_token, "jwt-2");
    assert_eq!(fake.mints(), 2);
}

#[tokio::test]
async fn a_401_refreshes_once_and_retries_once() {
    let (fake, auth) = signed_in().await;
    fake.script([DataApiError::invalid_token("Wallet JWT expired").into_response()]);
    let response = auth.send(data_request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(fake.mints(), 2);
    assert_eq!(fake.data_calls(), 2);
    assert_eq!(
        *fake.seen.bearers.lock().unwrap(),
        ["Bearer jwt-1", "Bearer jwt-2"]
    );
}

#[tokio::test]
async fn a_second_401_is_an_error_after_exactly_two_mints() {
    let (fake, auth) = signed_in().await;
    fake.script([
        DataApiError::invalid_token("Wallet JWT expired").into_response(),
        DataApiError::invalid_token("Wallet JWT expired").into_response(),
    ]);
    let error = auth.send(data_request()).await.unwrap_err();
    assert!(
        matches!(error, WalletError::Unauthorized(ref m) if m.contains("expired")),
        "{error}"
    );
    assert!(error.is_auth());
    assert_eq!(fake.mints(), 2);
    assert_eq!(fake.data_calls(), 2);
}

#[tokio::test]
async fn a_403_names_the_missing_scope_and_is_not_retried() {
    let (fake, auth) = signed_in().await;
    fake.script([DataApiError::insufficient_scope(
        "write:wallets",
        "JWT lacks scope write:wallets",
    )
    .into_response()]);
    let error = auth.send(data_request()).await.unwrap_err();
    assert_eq!(
        error,
        WalletError::MissingScope {
            scope: "write:wallets".to_owned(),
            message: "JWT lacks scope write:wallets".to_owned(),
        }
    );
    assert!(error.to_string().contains("write:wallets"));
    assert_eq!((fake.data_calls(), fake.mints()), (1, 1));
}

#[tokio::test]
async fn a_429_waits_a_short_retry_after_once_and_refuses_a_long_one() {
    let (fake, auth) = signed_in().await;
    let mut short = DataApiError::too_many_requests(1).into_response();
    short
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("0"));
    fake.script([short]);
    assert_eq!(
        auth.send(data_request()).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(fake.data_calls(), 2);

    fake.script([DataApiError::too_many_requests(3600).into_response()]);
    let error = auth.send(data_request()).await.unwrap_err();
    assert_eq!(
        error,
        WalletError::RateLimited {
            retry_after_secs: Some(3600)
        }
    );
    assert_eq!(fake.data_calls(), 3);
}

#[tokio::test]
async fn an_expired_pat_asks_for_a_new_sign_in_without_a_request() {
    let (fake, auth) = signed_in().await;
    fake.clock.advance(Duration::from_secs(86_400));
    let before = fake.requests();
    let error = auth.send(data_request()).await.unwrap_err();
    assert!(matches!(error, WalletError::ReauthRequired(_)), "{error}");
    assert!(error.to_string().contains("sign in again"));
    // And again: still no request, no loop.
    assert_eq!(
        auth.valid_token().await.unwrap_err(),
        WalletError::NotSignedIn
    );
    assert_eq!(fake.requests(), before);
    assert_eq!(fake.mints(), 1);
}

#[tokio::test]
async fn a_pat_revoked_elsewhere_asks_for_a_new_sign_in_after_one_exchange() {
    let (fake, auth) = signed_in().await;
    fake.seen.pat_revoked.store(true, Ordering::SeqCst);
    fake.script([DataApiError::invalid_token("Wallet JWT revoked").into_response()]);
    let error = auth.send(data_request()).await.unwrap_err();
    assert!(
        matches!(error, WalletError::ReauthRequired(ref m) if m.contains("revoked")),
        "{error}"
    );
    assert_eq!((fake.data_calls(), fake.mints()), (1, 2));
    assert!(auth.credentials().is_none());
}

#[tokio::test]
async fn a_refused_api_key_is_not_a_token_problem() {
    let fake = Fake::new();
    let config = WalletConfig::new(BASE, "wrong-key").unwrap();
    let auth = WalletAuth::new_with_transport(config, fake.transport());
    let error = auth
        .authenticate(&signer(), &["read:favorites"])
        .await
        .unwrap_err();
    assert!(matches!(error, WalletError::ApiKeyRejected(_)), "{error}");
    assert_eq!(fake.requests(), 1);
}

#[tokio::test]
async fn revoke_deletes_the_pat_with_the_session_and_forgets_everything() {
    let (fake, auth) = signed_in().await;
    auth.revoke().await.unwrap();
    assert_eq!(Fake::count(&fake.seen.revokes), 1);
    let before = fake.requests();
    assert_eq!(
        auth.valid_token().await.unwrap_err(),
        WalletError::NotSignedIn
    );
    assert_eq!(
        auth.send(data_request()).await.unwrap_err(),
        WalletError::NotSignedIn
    );
    assert_eq!(fake.requests(), before);
}

#[tokio::test]
async fn resumed_credentials_keep_working_and_must_match_the_server() {
    let (fake, auth) = signed_in().await;
    let saved = auth.credentials().unwrap();
    let other = WalletAuth::new_with_transport(
        WalletConfig::new("http://127.0.0.1:10", API_KEY).unwrap(),
        fake.transport(),
    );
    assert!(matches!(
        other.resume(saved.clone()),
        Err(WalletError::Config(_))
    ));
    let resumed = fake.client().resume(saved).unwrap();
    assert_eq!(resumed.valid_token().await.unwrap().access_token, "jwt-1");
    assert_eq!(fake.mints(), 1);
}

#[test]
fn config_needs_an_origin_and_a_key() {
    assert!(WalletConfig::new("127.0.0.1:8080", API_KEY).is_err());
    assert!(WalletConfig::new("http://127.0.0.1:8080/api", API_KEY).is_err());
    assert!(WalletConfig::new("http://127.0.0.1:8080/", "").is_err());
    let config = WalletConfig::new("https://api.example.com/", API_KEY).unwrap();
    assert_eq!(config.base_url(), "https://api.example.com");
    assert!(!format!("{config:?}").contains(API_KEY));
}
