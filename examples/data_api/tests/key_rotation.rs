//! Rotating the JWT signing key across restarts: the new key in
//! `DATA_API_SIGNING_KEY_FILE`, the old one in
//! `DATA_API_PREVIOUS_SIGNING_KEY_FILE`. A JWT the old key signed verifies
//! while it is the previous key and is refused once it is dropped; the JWKS
//! lists both meanwhile and may be cached for less than that overlap.

use super::*;

/// RFC 8410's example Ed25519 key, PKCS#8 PEM (the old key).
const OLD_KEY_PEM: &str = include_str!("../../../tests/fixtures/keys/rfc8410-ed25519.pem");

/// Key files in a fresh temporary directory, removed on drop.
struct KeyFiles(std::path::PathBuf);

impl KeyFiles {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "walletgate-key-rotation-{}-{}",
            std::process::id(),
            START
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old.pem"), OLD_KEY_PEM).unwrap();
        // The new key as a raw 32-byte seed: both formats are read.
        std::fs::write(dir.join("new.key"), [9u8; 32]).unwrap();
        Self(dir)
    }

    fn old(&self) -> std::path::PathBuf {
        self.0.join("old.pem")
    }

    fn new_key(&self) -> std::path::PathBuf {
        self.0.join("new.key")
    }
}

impl Drop for KeyFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A replica of the deployment at `origin` (every restart serves the same
/// origin: the JWT `iss`/`aud`) with these key files.
async fn replica(
    origin: &str,
    current: std::path::PathBuf,
    previous: Option<std::path::PathBuf>,
) -> Server {
    let origin = origin.to_owned();
    start_configured(START, move |config| {
        let listen = config.listen;
        let api_key = config.api_key.take();
        *config = Config::for_origin(listen, &origin).unwrap();
        config.api_key = api_key;
        config.signing_key_file = Some(current);
        config.previous_signing_key_file = previous;
    })
    .await
}

fn kids(jwks: &Value) -> Vec<String> {
    jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["kid"].as_str().unwrap().to_owned())
        .collect()
}

/// What `GET` favorites with the JWT answers on `server`.
async fn read_favorites(server: &Server, jwt: &str) -> StatusCode {
    let auth = bearer(jwt);
    let path = favorites_path(DEV_WALLET_0);
    server
        .keyed(Method::GET, &path, &[("authorization", &auth)], None)
        .await
        .status
}

#[tokio::test]
async fn a_jwt_of_the_previous_key_verifies_during_the_overlap_and_not_after() {
    let files = KeyFiles::new();
    // Before the rotation: the old key signs. Its origin is the deployment's.
    let old_file = files.old();
    let old = start_configured(START, move |config| {
        config.signing_key_file = Some(old_file);
    })
    .await;
    let origin = old.base.clone();
    let (_, _, old_jwt) = old
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    assert_eq!(read_favorites(&old, &old_jwt).await, StatusCode::OK);
    let old_kids = kids(
        &old.call(Method::GET, "/.well-known/jwks.json", &[], None)
            .await
            .body,
    );
    assert_eq!(old_kids.len(), 1);

    // During the overlap: the new key signs, the old one still verifies.
    let overlap = replica(&origin, files.new_key(), Some(files.old())).await;
    assert_eq!(read_favorites(&overlap, &old_jwt).await, StatusCode::OK);
    let jwks = overlap
        .call(Method::GET, "/.well-known/jwks.json", &[], None)
        .await;
    let both = kids(&jwks.body);
    assert_eq!(both.len(), 2);
    assert!(both.contains(&old_kids[0]));
    let cache = jwks.headers[header::CACHE_CONTROL].to_str().unwrap();
    let max_age: u64 = cache.rsplit("max-age=").next().unwrap().parse().unwrap();
    assert!(
        max_age < walletgate::tokens::IssuerConfig::DEFAULT_JWT_LIFETIME_SECS,
        "{cache}"
    );
    // After the previous key is dropped: its JWT is refused.
    let after = replica(&origin, files.new_key(), None).await;
    assert_eq!(
        read_favorites(&after, &old_jwt).await,
        StatusCode::UNAUTHORIZED
    );
    let only_new = kids(
        &after
            .call(Method::GET, "/.well-known/jwks.json", &[], None)
            .await
            .body,
    );
    assert_eq!(only_new.len(), 1);
    assert_ne!(only_new[0], old_kids[0], "the previous key is gone");
    assert!(both.contains(&only_new[0]));
}
