//! The wallet client against this server over TCP: `client::wallet` (the
//! SDK), the built `walletgate` binary (login, whoami, api request, auth
//! scopes/refresh/revoke/clear) and `walletgate mcp-bridge` driven by the
//! official Python MCP client over stdio. A child of `tests`, so it reuses
//! its constants; its own harness counts the HTTP requests the server sees.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use walletgate::client::payer::Payer;
use walletgate::client::wallet::{WalletAuth, WalletConfig, WalletError};
use walletgate::clock::Clock;

use super::mcp::{interop_dir, python_client};
use super::*;

/// Past the default 15-minute JWT lifetime and its leeway.
const PAST_JWT_EXPIRY: Duration = Duration::from_secs(15 * 60 + 31);

/// A server on loopback whose fake clock starts at the system time (the CLI
/// signs SIWE messages with its own clock) and that counts requests.
struct Counted {
    base: String,
    clock: FakeClock,
    requests: Arc<AtomicUsize>,
}

impl Counted {
    async fn start() -> Self {
        Self::start_with_quota(None).await
    }

    /// With the API key's quota at `per_minute` (else the default).
    async fn start_with_quota(per_minute: Option<u32>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        let origin = format!("http://{address}");
        let mut config = Config::for_origin(address, &origin).unwrap();
        config.api_key = Some(API_KEY.to_owned());
        if let Some(per_minute) = per_minute.and_then(std::num::NonZeroU32::new) {
            config.key_per_minute = per_minute;
        }
        let clock = FakeClock::at_unix_secs(walletgate::clock::SystemClock.now_unix_secs());
        let (router, _) = build_with_clock(&config, Arc::new(clock.clone())).unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let router = router.layer(tower::util::MapRequestLayer::new(
            move |request: axum::extract::Request| {
                counter.fetch_add(1, Ordering::SeqCst);
                request
            },
        ));
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            base: origin,
            clock,
            requests,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Sets the server's clock to the system time: the binary signs
    /// "Issued At: <now>" with the system clock.
    fn sync_clock(&self) {
        self.clock
            .set_unix_secs(walletgate::clock::SystemClock.now_unix_secs());
    }
}

// ---------------------------------------------------------------------------
// The SDK

#[tokio::test]
async fn sdk_signs_in_refreshes_on_401_and_asks_for_a_new_sign_in_after_revoke() {
    let server = Counted::start().await;
    let config = WalletConfig::new(&server.base, API_KEY).unwrap();
    let auth = WalletAuth::new(config)
        .unwrap()
        .with_clock(Arc::new(server.clock.clone()));
    let signer = Payer::from_hex_key(DEV_KEY_0).unwrap();
    let token = auth
        .authenticate(&signer, &["read:favorites"])
        .await
        .unwrap();
    assert_eq!(token.scopes, ["read:favorites"]);
    // nonce, verify, PAT, exchange.
    assert_eq!(server.requests(), 4);

    let favorites = || {
        Request::get(format!("{}?limit=2", favorites_path(DEV_WALLET_0)))
            .body(Bytes::new())
            .unwrap()
    };
    let page = auth.send(favorites()).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let body: Value = serde_json::from_slice(page.body()).unwrap();
    assert_eq!(body["nfts"].as_array().unwrap().len(), 2);
    assert_eq!(server.requests(), 5);

    // The server's clock says the JWT expired; the client's does not (a
    // separate clock), so it sends it, gets 401, re-mints once, retries once.
    let client_clock = FakeClock::at_unix_secs(server.clock.now_unix_secs());
    let auth = WalletAuth::new(WalletConfig::new(&server.base, API_KEY).unwrap())
        .unwrap()
        .with_clock(Arc::new(client_clock))
        .resume(auth.credentials().unwrap())
        .unwrap();
    server.clock.advance(PAST_JWT_EXPIRY);
    let before = server.requests();
    assert_eq!(
        auth.send(favorites()).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(server.requests() - before, 3, "401, exchange, retry");

    // A scope the PAT lacks.
    let error = auth
        .send(
            Request::put("/api/v2/accounts/agent")
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, WalletError::MissingScope { scope, .. } if scope == "write:wallets"),
        "{error}"
    );

    auth.revoke().await.unwrap();
    let before = server.requests();
    assert_eq!(
        auth.send(favorites()).await.unwrap_err(),
        WalletError::NotSignedIn
    );
    assert_eq!(server.requests(), before);
}

#[tokio::test]
async fn sdk_with_an_expired_pat_asks_for_a_new_sign_in_without_calling() {
    let server = Counted::start().await;
    let config = WalletConfig::new(&server.base, API_KEY)
        .unwrap()
        .with_pat_expires_in_days(1);
    let auth = WalletAuth::new(config)
        .unwrap()
        .with_clock(Arc::new(server.clock.clone()));
    let signer = Payer::from_hex_key(DEV_KEY_0).unwrap();
    auth.authenticate(&signer, &["read:favorites"])
        .await
        .unwrap();
    server.clock.advance(Duration::from_secs(86_400));
    let before = server.requests();
    let error = auth.valid_token().await.unwrap_err();
    assert!(matches!(error, WalletError::ReauthRequired(_)), "{error}");
    assert_eq!(server.requests(), before);
}

// ---------------------------------------------------------------------------
// The binary

/// `target/<profile>/walletgate`, built once per test run (a no-op when
/// fresh: the tests' own build already made the library).
fn walletgate_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // This test binary is target/<profile>/examples/data_api-<hash>.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_owned();
        let target_dir = profile_dir.parent().unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--quiet", "--all-features", "--bin", "walletgate"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("CARGO_TARGET_DIR", target_dir);
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building the walletgate binary failed");
        let binary = profile_dir.join("walletgate");
        assert!(binary.exists(), "{} is missing", binary.display());
        binary
    })
}

/// A temporary HOME for the binary.
struct Home(PathBuf);

impl Home {
    fn new(test: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("walletgate-cli-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn auth_file(&self) -> PathBuf {
        self.0.join(".walletgate/auth.json")
    }

    /// The secrets the auth file holds now.
    fn secrets(&self) -> Vec<String> {
        let file: Value =
            serde_json::from_slice(&std::fs::read(self.auth_file()).unwrap()).unwrap();
        let credentials = &file["credentials"];
        let mut secrets = vec![
            credentials["pat"].as_str().unwrap().to_owned(),
            credentials["jwt"].as_str().unwrap().to_owned(),
        ];
        for cookie in ["sessionCookie", "refreshCookie"] {
            let cookie = credentials[cookie].as_str().unwrap();
            secrets.push(cookie.split_once('=').unwrap().1.to_owned());
        }
        secrets
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One run of the binary: (exit code, stdout, stderr).
async fn walletgate(
    home: &Home,
    base: &str,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(walletgate_binary());
    command
        .args(args)
        .env("HOME", &home.0)
        .env("WALLETGATE_BASE_URL", base)
        .env("WALLETGATE_API_KEY", API_KEY)
        .env_remove("WALLETGATE_HOME")
        .env_remove("WALLETGATE_PRIVATE_KEY")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (name, value) in extra_env {
        command.env(name, value);
    }
    let output: Output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("walletgate finishes within 60 s")
        .expect("walletgate starts");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn cli_login_whoami_request_refresh_revoke_clear() {
    walletgate_binary();
    let server = Counted::start().await;
    let home = Home::new("flow");
    let base = server.base.as_str();
    let mut outputs = Vec::new();
    let mut secrets: Vec<String> = vec![DEV_KEY_0.to_owned(), API_KEY.to_owned()];

    server.sync_clock();
    let login = walletgate(
        &home,
        base,
        &["login", "--scopes", "read:favorites,read:wallets"],
        &[("WALLETGATE_PRIVATE_KEY", DEV_KEY_0)],
    )
    .await;
    assert_eq!(login.0, 0, "{login:?}");
    assert!(login.1.contains(DEV_WALLET_0), "{}", login.1);
    assert_eq!(mode(&home.auth_file()), 0o600);
    assert_eq!(mode(home.auth_file().parent().unwrap()), 0o700);
    secrets.extend(home.secrets());
    outputs.push(login);

    let whoami = walletgate(&home, base, &["whoami"], &[]).await;
    assert_eq!(whoami.0, 0, "{whoami:?}");
    assert!(whoami.1.contains(DEV_WALLET_0) && whoami.1.contains("expires at"));
    outputs.push(whoami);

    let path = favorites_path(DEV_WALLET_0);
    let request = [
        "api",
        "request",
        "GET",
        path.as_str(),
        "--params",
        r#"{"limit": 2}"#,
    ];
    let page = walletgate(&home, base, &request, &[]).await;
    assert_eq!(page.0, 0, "{page:?}");
    let body: Value = serde_json::from_str(&page.1).unwrap();
    assert_eq!(body["nfts"].as_array().unwrap().len(), 2);
    outputs.push(page);

    let scopes = walletgate(&home, base, &["auth", "scopes", "--format", "json"], &[]).await;
    assert_eq!(scopes.0, 0, "{scopes:?}");
    let listed: Value = serde_json::from_str(&scopes.1).unwrap();
    assert_eq!(listed["scopes"], json!(["read:favorites", "read:wallets"]));
    outputs.push(scopes);

    server.clock.advance(Duration::from_secs(5));
    let refresh = walletgate(&home, base, &["auth", "refresh"], &[]).await;
    assert_eq!(refresh.0, 0, "{refresh:?}");
    assert!(refresh.1.contains("expires at"), "{}", refresh.1);
    secrets.extend(home.secrets());
    outputs.push(refresh);

    // The server says the JWT expired (the binary's clock does not): one
    // 401, one exchange, one retry.
    server.clock.advance(PAST_JWT_EXPIRY);
    let before = server.requests();
    let retried = walletgate(&home, base, &request, &[]).await;
    assert_eq!(retried.0, 0, "{retried:?}");
    assert_eq!(server.requests() - before, 3);
    secrets.extend(home.secrets());
    outputs.push(retried);

    let revoke = walletgate(&home, base, &["auth", "revoke"], &[]).await;
    assert_eq!(revoke.0, 0, "{revoke:?}");
    outputs.push(revoke);

    let before = server.requests();
    let refused = walletgate(&home, base, &request, &[]).await;
    assert_eq!(refused.0, 2, "{refused:?}");
    assert!(refused.2.contains("sign in again"), "{}", refused.2);
    assert_eq!(server.requests(), before, "no request after revoke");
    outputs.push(refused);

    let clear = walletgate(&home, base, &["auth", "clear"], &[]).await;
    assert_eq!(clear.0, 0, "{clear:?}");
    assert!(clear.1.contains("stays valid"), "{}", clear.1);
    assert!(!home.auth_file().exists());
    outputs.push(clear);

    for (_, stdout, stderr) in &outputs {
        for secret in &secrets {
            assert!(
                !stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()),
                "a secret was printed"
            );
        }
    }
}

#[tokio::test]
async fn cli_refuses_an_auth_file_others_may_read_and_a_login_without_scopes() {
    use std::os::unix::fs::PermissionsExt;
    walletgate_binary();
    let server = Counted::start().await;
    let home = Home::new("modes");
    let base = server.base.as_str();
    let no_scopes = walletgate(
        &home,
        base,
        &["login", "--scopes", ""],
        &[("WALLETGATE_PRIVATE_KEY", DEV_KEY_0)],
    )
    .await;
    assert_eq!(no_scopes.0, 64, "a usage error: {no_scopes:?}");
    assert_eq!(server.requests(), 0);
    server.sync_clock();
    let login = walletgate(
        &home,
        base,
        &["login", "--scopes", "read:favorites"],
        &[("WALLETGATE_PRIVATE_KEY", DEV_KEY_0)],
    )
    .await;
    assert_eq!(login.0, 0, "{login:?}");
    std::fs::set_permissions(home.auth_file(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let whoami = walletgate(&home, base, &["whoami"], &[]).await;
    assert_eq!(whoami.0, 2, "{whoami:?}");
    assert!(whoami.2.contains("chmod 600"), "{}", whoami.2);
}

#[tokio::test]
async fn cli_exit_codes_json_errors_auth_login_status_and_flags_where_they_act() {
    walletgate_binary();
    // Four requests a minute: exactly a sign-in (nonce, verify, PAT, exchange).
    let server = Counted::start_with_quota(Some(4)).await;
    let home = Home::new("contract");
    let base = server.base.as_str();

    // Usage (64): `whoami` calls no API, so it takes no --base-url.
    let usage = walletgate(&home, base, &["whoami", "--base-url", base], &[]).await;
    assert_eq!(usage.0, 64, "{usage:?}");
    // Authentication (2), as one JSON document: not signed in.
    let status = walletgate(&home, base, &["auth", "status", "--format", "json"], &[]).await;
    assert_eq!(status.0, 2, "{status:?}");
    let error: Value = serde_json::from_str(&status.1).unwrap();
    assert_eq!(error["error"]["kind"], "authentication");
    assert_eq!(error["error"]["exit"], 2);
    assert!(status.2.contains("not signed in"), "{}", status.2);

    server.sync_clock();
    let login = walletgate(
        &home,
        base,
        &["auth", "login", "--scopes", "read:favorites"],
        &[("WALLETGATE_PRIVATE_KEY", DEV_KEY_0)],
    )
    .await;
    assert_eq!(login.0, 0, "{login:?}");
    let mut secrets = vec![DEV_KEY_0.to_owned(), API_KEY.to_owned()];
    secrets.extend(home.secrets());

    let status = walletgate(&home, base, &["auth", "status", "--format", "json"], &[]).await;
    assert_eq!(status.0, 0, "{status:?}");
    let shown: Value = serde_json::from_str(&status.1).unwrap();
    assert_eq!(shown["address"], DEV_WALLET_0);
    assert_eq!(shown["baseUrl"], base);
    assert_eq!(shown["scopes"], json!(["read:favorites"]));
    assert!(shown["expiresAt"].is_string() && shown["patExpiresAt"].is_string());

    // A fresh minute: four calls with -X and -H, then the fifth is rate
    // limited (3) with a Retry-After longer than the client waits.
    server.clock.advance(Duration::from_secs(61));
    let path = format!("{}?limit=1", favorites_path(DEV_WALLET_0));
    let request = [
        "api",
        "request",
        "-X",
        "GET",
        path.as_str(),
        "-H",
        "X-Request-Id: 7",
    ];
    let mut outputs = vec![login, status];
    for _ in 0..4 {
        let page = walletgate(&home, base, &request, &[]).await;
        assert_eq!(page.0, 0, "{page:?}");
        outputs.push(page);
    }
    let limited = walletgate(&home, base, &request, &[]).await;
    assert_eq!(limited.0, 3, "{limited:?}");
    outputs.push(limited);

    // The method twice is a usage error, found before any request.
    let before = server.requests();
    let twice = walletgate(
        &home,
        base,
        &["api", "request", "GET", "/x", "-X", "POST"],
        &[],
    )
    .await;
    assert_eq!(twice.0, 64, "{twice:?}");
    assert_eq!(server.requests(), before);

    for (_, stdout, stderr) in &outputs {
        for secret in &secrets {
            assert!(
                !stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()),
                "a secret was printed"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// The MCP bridge

/// The official Python MCP client against `walletgate mcp-bridge` over
/// stdio; at `expire-now` the server's clock passes the JWT's expiry.
async fn python_through_the_bridge(mcp_mode: &str) -> String {
    let python = python_client();
    walletgate_binary();
    let server = Counted::start().await;
    let home = Home::new(&format!("bridge-{mcp_mode}"));
    server.sync_clock();
    let login = walletgate(
        &home,
        &server.base,
        &["login", "--scopes", "read:favorites,read:wallets"],
        &[("WALLETGATE_PRIVATE_KEY", DEV_KEY_0)],
    )
    .await;
    assert_eq!(login.0, 0, "{login:?}");
    let secrets = home.secrets();

    let mut child = tokio::process::Command::new(python)
        .arg(interop_dir("mcp-python").join("check_bridge.py"))
        .env("BRIDGE_BIN", walletgate_binary())
        .env("BRIDGE_HOME", &home.0)
        .env("BRIDGE_WALLET", DEV_WALLET_0)
        .env("MCP_MODE", mcp_mode)
        .env("WALLETGATE_API_KEY", API_KEY)
        .env("WALLETGATE_BASE_URL", &server.base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let run = async {
        let mut output = String::new();
        // Bounded: the script prints a handful of lines, then exits.
        for _ in 0..100 {
            let Some(line) = lines.next_line().await.unwrap() else {
                break;
            };
            if line == "expire-now" {
                server.clock.advance(PAST_JWT_EXPIRY);
                stdin.write_all(b"go\n").await.unwrap();
                stdin.flush().await.unwrap();
            }
            output.push_str(&line);
            output.push('\n');
        }
        let mut errors = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut errors)
            .await
            .unwrap();
        (output, errors, child.wait().await.unwrap())
    };
    let (output, errors, status) = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the client finishes within 120 s");
    for secret in secrets.iter().chain(home.secrets().iter()) {
        assert!(
            !output.contains(secret.as_str()) && !errors.contains(secret.as_str()),
            "a secret was printed"
        );
    }
    assert!(
        status.success(),
        "check_bridge.py failed ({status}):\n{output}\n{errors}"
    );
    assert_eq!(
        output.lines().last(),
        Some("all checks passed"),
        "{output}\n{errors}"
    );
    assert!(!errors.contains("Session termination failed"), "{errors}");
    output
}

#[tokio::test]
async fn python_mcp_client_through_the_bridge_with_the_initialize_handshake() {
    let output = python_through_the_bridge("legacy").await;
    assert!(output.contains("ok: wallet tool get_favorites"), "{output}");
    assert!(output.contains("ok: after the JWT expired"), "{output}");
}

#[tokio::test]
async fn python_mcp_client_through_the_bridge_probing_server_discover() {
    let output = python_through_the_bridge("auto").await;
    assert!(output.contains("ok: after the JWT expired"), "{output}");
}
