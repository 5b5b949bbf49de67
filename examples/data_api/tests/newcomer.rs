//! The walkthrough's curl path (docs/walkthrough.md), run as written: the node login script
//! (`tests/interop/dev-jwt/login.mjs`, behind `scripts/dev-jwt.sh`) signs in
//! with viem's EIP-4361 rendering and a public development key, and the JWT
//! it writes reads favorites. (The `walletgate login` path is tests/cli.rs.)

use std::path::PathBuf;
use std::time::Duration;

use http::{Method, StatusCode};

use walletgate::clock::{Clock, SystemClock};

use super::{API_KEY, DEV_WALLET_0, bearer, favorites_path, start_at};

fn login_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/dev-jwt")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_script_gets_a_jwt_that_reads_favorites() {
    let dir = login_dir();
    assert!(
        dir.join("node_modules/viem").is_dir(),
        "the login script's dependency is not installed: run `npm ci --prefix tests/interop/dev-jwt` first"
    );
    // The script signs "Issued At: <now>", so the server's clock starts at now.
    let server = start_at(SystemClock.now_unix_secs()).await;
    let jwt_file = std::env::temp_dir().join(format!(
        "walletgate-dev-jwt-{}-{}",
        std::process::id(),
        server.base.rsplit(':').next().unwrap()
    ));

    let mut command = std::process::Command::new("node");
    command
        .arg("login.mjs")
        .current_dir(&dir)
        .env("DATA_API_URL", &server.base)
        .env("DATA_API_KEY", API_KEY)
        .env("SCOPES", "read:favorites")
        .env("DEV_JWT_FILE", &jwt_file)
        .env_remove("DEV_PRIVATE_KEY");
    // Every fetch in the script gives up after 10 s, so it ends by itself.
    let run = tokio::task::spawn_blocking(move || command.output());
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the login script finished within 60 s")
        .unwrap()
        .expect("`node` must be on PATH");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node login.mjs failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(DEV_WALLET_0), "{stdout}");
    assert!(stdout.contains("read:favorites"), "{stdout}");

    let jwt = std::fs::read_to_string(&jwt_file).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&jwt_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the JWT file is private to its owner");
    }
    std::fs::remove_file(&jwt_file).unwrap();
    assert!(
        !stdout.contains(jwt.trim()),
        "the script never prints the JWT"
    );

    let auth = bearer(jwt.trim());
    // Wallet 0 has five seeded favorites: one default-sized page holds them all.
    let page = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &auth)
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body["error"]);
    assert_eq!(page.body["nfts"].as_array().unwrap().len(), 5);
    assert!(page.body.get("next").is_none());
}
