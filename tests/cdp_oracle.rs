//! walletgate's `CdpAuth` against the official CDP SDK (`@coinbase/cdp-sdk`
//! `generateJwt`, in `tests/interop/cdp`): for the same key and call, the
//! same JWT header and claims but the random nonce and the times.

use std::path::PathBuf;
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::{Method, Uri};
use serde_json::Value;
use walletgate::x402::facilitator::{CdpAuth, FacilitatorAuth};

fn oracle(key_id: &str, secret: &str, method: &str, host: &str, path: &str) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/cdp");
    assert!(
        dir.join("node_modules/@coinbase/cdp-sdk").is_dir(),
        "run `npm ci --prefix tests/interop/cdp` (or `bash .ci/run`)"
    );
    let output = Command::new("node")
        .arg("jwt.mjs")
        .args([method, host, path])
        .env("CDP_KEY_ID", key_id)
        .env("CDP_KEY_SECRET", secret)
        .current_dir(&dir)
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON line")
}

fn ours(auth: &CdpAuth, method: Method, url: &str) -> Value {
    let uri: Uri = url.parse().unwrap();
    let header = auth.authorization(&method, &uri).unwrap();
    let jwt = header.to_str().unwrap().strip_prefix("Bearer ").unwrap();
    let mut parts = jwt.split('.').map(|part| {
        serde_json::from_slice::<Value>(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    });
    serde_json::json!({"header": parts.next().unwrap(), "claims": parts.next().unwrap()})
}

/// Both sides with their random and time-dependent members checked, then removed.
fn comparable(mut jwt: Value) -> Value {
    let nonce = jwt["header"]["nonce"].as_str().unwrap().to_owned();
    assert_eq!(nonce.len(), 32, "16 random bytes in hex");
    assert!(nonce.bytes().all(|byte| byte.is_ascii_hexdigit()));
    let claims = &jwt["claims"];
    let iat = claims["iat"].as_u64().unwrap();
    assert_eq!(claims["nbf"].as_u64(), Some(iat));
    assert_eq!(claims["exp"].as_u64(), Some(iat + 120));
    jwt["header"].as_object_mut().unwrap().remove("nonce");
    for member in ["iat", "nbf", "exp"] {
        jwt["claims"].as_object_mut().unwrap().remove(member);
    }
    jwt
}

#[test]
fn the_jwt_matches_the_official_sdk_for_both_key_kinds() {
    let ed25519 = {
        let key = ed25519_dalek::SigningKey::from_bytes(&[11; 32]);
        let mut bytes = key.to_bytes().to_vec();
        bytes.extend_from_slice(key.verifying_key().as_bytes());
        STANDARD.encode(bytes)
    };
    let es256 = {
        use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
        p256::SecretKey::from_slice(&[13; 32])
            .unwrap()
            .to_pkcs8_pem(LineEnding::LF)
            .unwrap()
            .to_string()
    };
    let key_id = "organizations/test-org/apiKeys/test-key";
    for secret in [ed25519, es256] {
        let auth = CdpAuth::new(key_id, &secret).unwrap();
        for (method, path) in [
            ("POST", "/platform/v2/x402/verify"),
            ("POST", "/platform/v2/x402/settle"),
            ("GET", "/platform/v2/x402/supported"),
        ] {
            let theirs = oracle(key_id, &secret, method, "api.cdp.coinbase.com", path);
            let mine = ours(
                &auth,
                method.parse().unwrap(),
                &format!("https://api.cdp.coinbase.com{path}"),
            );
            assert_eq!(comparable(mine), comparable(theirs), "{method} {path}");
        }
    }
}
