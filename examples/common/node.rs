//! Node scripts for the examples' tests: the interop clients and the
//! browser tests in `tests/interop/<folder>`, each printing one JSON line.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

/// Runs `node <script> <args…>` in `tests/interop/<folder>` (whose
/// `node_modules/<package>` must be installed) with `env` and, if given,
/// `stdin`, for at most `limit`: the one JSON line it prints. Panics (with
/// its output) if it fails.
pub(crate) async fn node_json(
    folder: &str,
    package: &str,
    script: &str,
    args: &[&str],
    env: &[(&str, String)],
    stdin: Option<&str>,
    limit: Duration,
) -> Value {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(folder);
    assert!(
        folder.join("node_modules").join(package).is_dir(),
        "run `npm ci --prefix {}` (or `bash .ci/run`)",
        folder.display()
    );
    let mut command = tokio::process::Command::new("node");
    command
        .arg(script)
        .args(args)
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .current_dir(&folder)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("node runs");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .expect("the client finishes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}
