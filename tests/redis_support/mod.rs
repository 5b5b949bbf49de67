//! A real redis-server for the Redis backends' tests.
//!
//! `.ci/run` starts one on loopback and exports `WALLETGATE_TEST_REDIS_URL`;
//! without it, [`shared_url`] starts one for this test binary (so
//! `cargo test --features redis` works on a machine with `redis-server`).
//! Tests that stop Redis on purpose start their own with [`RedisServer::start`].
//! Each test takes its own key prefix ([`unique_prefix`]) so tests sharing one
//! server never see each other's keys.
//!
//! A Redis Cluster (three primaries, three replicas) comes from
//! `redis-cluster.sh` beside this file: [`RedisCluster::start`] for a test
//! that stops nodes, [`shared_cluster_seeds`] for the contract tests, which
//! run on it instead of one redis-server when `WALLETGATE_TEST_REDIS_TOPOLOGY`
//! is `cluster` (`.ci/run` runs them once each way and exports
//! `WALLETGATE_TEST_REDIS_CLUSTER_URLS`).
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A redis-server child process on a free loopback port, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts redis-server on a free loopback port and waits until it answers.
    pub fn start() -> Self {
        let port = free_port();
        Self::start_on(port)
    }

    /// Starts redis-server on `port` (used to restart a stopped one in place).
    pub fn start_on(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    /// Starts redis-server on a free loopback port as a replica of the one
    /// on `primary_port`, and waits until the primary counts it in sync.
    pub fn start_replica_of(primary_port: u16) -> Self {
        let primary = primary_port.to_string();
        let replica = Self::start_with(free_port(), &["--replicaof", "127.0.0.1", &primary]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let info = redis_cli(primary_port, &["info", "replication"]);
            let synced = format!("port={},state=online", replica.port);
            if info.contains(&synced) {
                return replica;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the replica on {} never synced", replica.port);
    }

    /// Makes this replica a primary (`REPLICAOF NO ONE`), as a managed
    /// endpoint's failover promotes one.
    pub fn promote(&self) {
        let answer = redis_cli(self.port, &["replicaof", "no", "one"]);
        assert!(answer.contains("OK"), "REPLICAOF NO ONE: {answer:?}");
    }

    fn start_with(port: u16, extra: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("walletgate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir for redis-server");
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(extra)
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install -y redis-server)");
        let server = Self {
            child: Some(child),
            port,
            dir,
        };
        server.wait_until_ready();
        server
    }

    /// Starts redis-server serving TLS only (`--tls-port`, no plain port) on
    /// a free loopback port, with a server certificate for `127.0.0.1` and
    /// `localhost` that a CA made here signed; returns the server and that
    /// CA's PEM (the only root a client must trust). Its URL: [`Self::tls_url`].
    pub fn start_tls() -> (Self, String) {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "walletgate-redis-tls-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir for redis-server");
        let (ca_pem, cert_pem, key_pem) = ca_and_loopback_certificate();
        std::fs::write(dir.join("server.crt"), cert_pem).unwrap();
        std::fs::write(dir.join("server.key"), key_pem).unwrap();
        std::fs::write(dir.join("ca.crt"), &ca_pem).unwrap();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", "0"])
            .args(["--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(dir.join("server.crt"))
            .arg("--tls-key-file")
            .arg(dir.join("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(dir.join("ca.crt"))
            .args([
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install -y redis-server)");
        let server = Self {
            child: Some(child),
            port,
            dir,
        };
        server.wait_until_ready();
        (server, ca_pem)
    }

    /// `rediss://127.0.0.1:{port}` (a server from [`Self::start_tls`]).
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port, to restart a stopped server on the same address.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL: no shutdown, as if its machine died) and
    /// waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn wait_until_ready(&self) {
        wait_for_port(self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA (PEM) and a certificate it signed for `127.0.0.1` and `localhost`
/// (PEM, with its PEM key).
pub fn ca_and_loopback_certificate() -> (String, String, String) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "walletgate test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap()
            .signed_by(&server_key, &ca)
            .unwrap();
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

/// The shared Redis of this run: `WALLETGATE_TEST_REDIS_URL`, or one started
/// for this test binary and left to the OS when the binary exits.
pub fn shared_url() -> String {
    static STARTED: OnceLock<String> = OnceLock::new();
    if let Ok(url) = std::env::var("WALLETGATE_TEST_REDIS_URL") {
        return url;
    }
    STARTED.get_or_init(start_for_this_process).clone()
}

/// A redis-server that outlives no test binary: a shell watches this process
/// and stops the server once it is gone (a test binary never runs statics'
/// destructors, so a plain child would be left running).
fn start_for_this_process() -> String {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("walletgate-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir for redis-server");
    let watched = format!(
        "redis-server --bind 127.0.0.1 --port {port} --save '' --appendonly no --dir '{dir}' & \
         server=$!; for _ in $(seq 7200); do kill -0 {parent} 2>/dev/null || break; sleep 1; done; \
         kill $server; rm -rf '{dir}'",
        dir = dir.display(),
        parent = std::process::id(),
    );
    spawn_watched(
        &watched,
        Stdio::null(),
        "redis-server (apt-get install -y redis-server)",
    );
    wait_for_port(port);
    format!("redis://127.0.0.1:{port}")
}

/// Waits until something listens on `port` (10 s at most).
fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not start on port {port} (is it installed?)");
}

/// A key prefix no other test (or earlier run against the same server) uses.
pub fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "test:{test}:{}:{nanos}:{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// The script that starts and stops a test cluster.
const CLUSTER_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/redis_support/redis-cluster.sh"
);

/// Whether the contract tests run on a Redis Cluster this time
/// (`WALLETGATE_TEST_REDIS_TOPOLOGY=cluster`).
pub fn on_cluster() -> bool {
    std::env::var("WALLETGATE_TEST_REDIS_TOPOLOGY").is_ok_and(|topology| topology == "cluster")
}

/// A Redis Cluster on loopback (three primaries with a replica each, a
/// node timeout of 2 s), stopped on drop.
pub struct RedisCluster {
    dir: PathBuf,
    seeds: Vec<String>,
}

impl RedisCluster {
    /// Starts the six nodes and waits for `cluster_state:ok` on each.
    pub fn start() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "walletgate-redis-cluster-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let output = Command::new("bash")
            .arg(CLUSTER_SCRIPT)
            .arg("start")
            .arg(&dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("bash to run redis-cluster.sh");
        assert!(output.status.success(), "redis-cluster.sh start failed");
        let seeds = parse_seeds(&String::from_utf8_lossy(&output.stdout));
        Self { dir, seeds }
    }

    /// The six nodes' URLs (`redis://127.0.0.1:port`).
    pub fn seeds(&self) -> Vec<String> {
        self.seeds.clone()
    }

    /// The port of the primary that serves `key`'s slot now.
    pub fn primary_for(&self, key: &str) -> u16 {
        let slot: u16 = self
            .cli(&["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number");
        for line in self.cli(&["cluster", "nodes"]).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let mut ends = range.split('-').filter_map(|end| end.parse::<u16>().ok());
                match (ends.next(), ends.next()) {
                    (Some(first), Some(last)) => (first..=last).contains(&slot),
                    (Some(only), None) => only == slot,
                    _ => false,
                }
            });
            if serves {
                let address = fields[1].split('@').next().unwrap_or_default();
                return address.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
        panic!("no primary serves slot {slot}");
    }

    /// SIGKILLs the node on `port` (no shutdown: as if its machine died).
    pub fn kill(&self, port: u16) {
        let pid = std::fs::read_to_string(self.dir.join(format!("redis-{port}.pid")))
            .expect("the node's pid file");
        let status = Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -KILL {port}");
    }

    /// Whether the cluster answers `cluster_state:ok` on a node still alive.
    pub fn is_ok(&self, alive_port: u16) -> bool {
        redis_cli(alive_port, &["cluster", "info"]).contains("cluster_state:ok")
    }

    /// `redis-cli` on the first node that answers.
    fn cli(&self, args: &[&str]) -> String {
        for seed in &self.seeds {
            let port: u16 = seed.rsplit(':').next().unwrap().parse().unwrap();
            let answer = redis_cli(port, args);
            if !answer.is_empty() {
                return answer;
            }
        }
        panic!("no cluster node answers");
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(CLUSTER_SCRIPT)
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// `redis-cli -p port args…`'s output, empty when the node does not answer.
fn redis_cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .unwrap_or_default()
}

fn parse_seeds(urls: &str) -> Vec<String> {
    urls.trim()
        .split(',')
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The shared Redis Cluster of this run: `WALLETGATE_TEST_REDIS_CLUSTER_URLS`
/// (comma-separated seeds), or one started for this test binary and stopped
/// by a watching shell once the binary is gone.
pub fn shared_cluster_seeds() -> Vec<String> {
    static STARTED: OnceLock<Vec<String>> = OnceLock::new();
    if let Ok(urls) = std::env::var("WALLETGATE_TEST_REDIS_CLUSTER_URLS") {
        return parse_seeds(&urls);
    }
    STARTED
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!(
                "walletgate-redis-cluster-shared-{}",
                std::process::id()
            ));
            let urls_file = dir.with_extension("urls");
            let watched = format!(
                "bash '{script}' start '{dir}' > '{urls}.tmp' && mv '{urls}.tmp' '{urls}' || exit 1; \
                 for _ in $(seq 7200); do kill -0 {parent} 2>/dev/null || break; sleep 1; done; \
                 bash '{script}' stop '{dir}'; rm -f '{urls}'",
                script = CLUSTER_SCRIPT,
                dir = dir.display(),
                urls = urls_file.display(),
                parent = std::process::id(),
            );
            spawn_watched(&watched, Stdio::inherit(), "a Redis Cluster");
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(urls) = std::fs::read_to_string(&urls_file) {
                    return parse_seeds(&urls);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            panic!("the shared Redis Cluster did not start (redis-server, redis-cli installed?)");
        })
        .clone()
}

/// A TCP forwarder on a free loopback port in front of a redis-server on
/// loopback: the one address of a managed Redis endpoint, which a failover
/// points at another node. Connections made while it points nowhere are
/// closed at once (Redis unreachable). Stopped on drop. Needs a tokio
/// runtime.
pub struct Forwarder {
    port: u16,
    target: std::sync::Arc<std::sync::Mutex<Option<u16>>>,
    /// Bumped on each switch: every open connection ends (as a failover
    /// drops them), new ones go to the new target.
    switches: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:target`.
    pub async fn start(target: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the forwarder");
        let port = listener.local_addr().unwrap().port();
        let target = std::sync::Arc::new(std::sync::Mutex::new(Some(target)));
        let switches = std::sync::Arc::new(tokio::sync::watch::channel(0_u64).0);
        let (to, switched) = (target.clone(), switches.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Some(port) = *to.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
                else {
                    // Pointing nowhere: closed at once.
                    continue;
                };
                let mut switch = switched.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = switch.changed() => {}
                    }
                });
            }
        });
        Self {
            port,
            target,
            switches,
            accept,
        }
    }

    /// `redis://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Points the address at `127.0.0.1:target`, or nowhere (`None`);
    /// every open connection ends.
    pub fn point_to(&self, target: Option<u16>) {
        *self
            .target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = target;
        self.switches.send_modify(|switches| *switches += 1);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.accept.abort();
        // Ends every open connection.
        self.point_to(None);
    }
}

/// Runs `script` (which stops what it started once this process is gone, or
/// after 2 hours) in `sh`, its standard error to `stderr`; `what` names it
/// if `sh` cannot start.
fn spawn_watched(script: &str, stderr: Stdio, what: &str) {
    // The shell ends after this process (or after 2 hours): nothing to wait for.
    #[allow(clippy::zombie_processes)]
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|error| panic!("sh to start {what}: {error}"));
}
