#!/usr/bin/env bash
# A throwaway Redis Cluster on loopback for the Redis backends' tests: three
# primaries and three replicas, no persistence.
#
#   redis-cluster.sh start DIR   starts it in DIR (created), prints the six
#                                seed URLs comma-separated once the cluster
#                                answers `cluster_state:ok` on every node
#   redis-cluster.sh stop DIR    stops the servers started in DIR, removes DIR
#
# Shared by .ci/run (which exports WALLETGATE_TEST_REDIS_CLUSTER_URLS) and the
# tests (tests/redis_support/mod.rs). REDIS_CLUSTER_NODE_TIMEOUT_MS (default
# 2000, Redis's own default is 15000) is how long a primary may be silent
# before its replica is promoted: the failover tests wait about that long.
set -euo pipefail

command=${1:?start or stop}
dir=${2:?a directory}

stop() {
  pids=""
  for pidfile in "$dir"/redis-*.pid; do
    [ -f "$pidfile" ] || continue
    pids="$pids $(cat "$pidfile")"
  done
  for pid in $pids; do kill "$pid" 2>/dev/null || true; done
  # Gone before the directory is (5 s at most).
  for _ in $(seq 100); do
    alive=""
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.05
  done
  rm -rf "$dir"
}

case "$command" in
stop)
  stop
  ;;
start)
  mkdir -p "$dir"
  # Six ports whose cluster-bus ports (+10000) are free as well.
  ports=$(python3 - <<'PY'
import random, socket
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
chosen = []
while len(chosen) < 6:
    port = random.randint(20000, 45000)
    if port not in chosen and free(port) and free(port + 10000):
        chosen.append(port)
print(" ".join(map(str, chosen)))
PY
)
  timeout_ms=${REDIS_CLUSTER_NODE_TIMEOUT_MS:-2000}
  trap 'stop; exit 1' ERR
  for port in $ports; do
    # A directory each: a replica's initial sync writes an RDB file there.
    # Validity factor 0: a replica may always be promoted, however long its
    # link was down (a test kills primaries on purpose).
    mkdir -p "$dir/$port"
    redis-server --bind 127.0.0.1 --port "$port" \
      --cluster-enabled yes --cluster-config-file "$dir/$port/nodes.conf" \
      --cluster-node-timeout "$timeout_ms" --cluster-replica-validity-factor 0 \
      --save '' --appendonly no \
      --daemonize yes --pidfile "$dir/redis-$port.pid" \
      --dir "$dir/$port" --logfile "$dir/$port/redis.log"
  done
  for port in $ports; do
    for _ in $(seq 200); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      sleep 0.05
    done
  done
  nodes=""
  for port in $ports; do nodes="$nodes 127.0.0.1:$port"; done
  # shellcheck disable=SC2086
  redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1
  for port in $ports; do
    for attempt in $(seq 300); do
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
      [ "$attempt" = 300 ] && { echo "cluster not ok on $port" >&2; false; }
      sleep 0.1
    done
  done
  # Every replica has synced with its primary (a failover promotes a copy).
  for port in $ports; do
    for attempt in $(seq 300); do
      info=$(redis-cli -p "$port" info replication 2>/dev/null || true)
      case "$info" in
      *role:master*) break ;;
      *master_link_status:up*) break ;;
      esac
      [ "$attempt" = 300 ] && { echo "replica $port never synced" >&2; false; }
      sleep 0.1
    done
  done
  urls=""
  for port in $ports; do urls="$urls${urls:+,}redis://127.0.0.1:$port"; done
  echo "$urls"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
