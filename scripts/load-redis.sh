#!/usr/bin/env bash
# The paid path of the gateway with its stores in Redis vs in memory, with wrk
# on loopback: the same pre-signed payments (each sent once) against
#   1. the gateway with its default in-memory stores,
#   2. the gateway with GATEWAY_REDIS_URL (claims, spent authorizations, the
#      dev ledger in a redis-server this script starts on a free loopback port),
# then the throughput ratio (2)/(1), and Redis round trips per paid request
# (scripts run, from INFO commandstats before and after the Redis run, divided
# by the 200s; every payment-store call is a script). A run that used up its
# payments (exhausted=2) measured the payment count, not the server: raise
# LOAD_PAID_COUNT.
# Bounded: LOAD_DURATION per run (default 5s), at most LOAD_PAID_COUNT
# payments (default 60000). Needs wrk and redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${LOAD_DURATION:-5s}
threads=${LOAD_THREADS:-2}
connections=${LOAD_CONNECTIONS:-32}
paid_count=${LOAD_PAID_COUNT:-60000}
port=${LOAD_PORT:-18412}
target=${CARGO_TARGET_DIR:-target}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing: apt-get install -y redis-server" >&2; exit 1; }

echo "machine: $(nproc) CPUs; load before: $(uptime | sed 's/.*load average/load average/')"
. scripts/load/gateway_features.sh
cargo build --quiet --release --features "$gateway_features,redis" --example gateway --example gateway_presign

work=$(mktemp -d)
server=""
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  if [ -f "$work/redis.pid" ]; then kill "$(cat "$work/redis.pid")" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
  --daemonize yes --pidfile "$work/redis.pid" --dir "$work" --logfile "$work/redis.log"
rcli() { redis-cli -p "$redis_port" "$@"; }
for _ in $(seq 1 50); do rcli ping >/dev/null 2>&1 && break; sleep 0.1; done

base="http://127.0.0.1:$port"
paid_body='{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'

start_gateway() { # extra environment assignments
  env GATEWAY_LISTEN="127.0.0.1:$port" RUST_LOG="${RUST_LOG:-warn}" "$@" \
    "$target/release/examples/gateway" >"$work/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    curl -fs -o /dev/null "$base/v1/models" && return 0
    sleep 0.1
  done
  echo "the gateway did not start:" >&2; cat "$work/server.log" >&2; exit 1
}
stop_gateway() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }

run() { # name -> "requests=… rps=… …"
  LOAD_METHOD=POST LOAD_BODY=$paid_body LOAD_EXPECT=200 LOAD_PAYMENTS="$work/payments.txt" LOAD_THREADS=$threads \
    wrk -t"$threads" -c"$connections" -d"$duration" -s scripts/load/gateway.lua "$base/v1/chat/completions" \
    | grep LOAD_RESULT | sed 's/^LOAD_RESULT //'
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# Commands the clients sent (INFO commandstats also counts the commands a script runs
# inside Redis: those are not round trips). The payment stores' commands are scripts.
round_trips() { rcli info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ {sum += $3} END {print sum + 0}'; }

echo "wrk: $threads threads, $connections connections, $duration per run, gateway, redis-server and wrk on this machine"
start_gateway
quote=$(curl -s -o /dev/null -D - -H 'content-type: application/json' -d "$paid_body" "$base/v1/chat/completions" \
  | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required" {print $2}')
"$target/release/examples/gateway_presign" "$quote" "$paid_count" "$work/payments.txt"
memory=$(run)
printf '%-28s %s\n' "paid chat, stores in memory" "$memory"
stop_gateway

start_gateway GATEWAY_REDIS_URL="redis://127.0.0.1:$redis_port" GATEWAY_REDIS_PREFIX=load
# The gateway funds the development accounts in the background once Redis answers.
for _ in $(seq 1 50); do [ -n "$(rcli --scan --pattern 'load:x402-ledger:balance:*' | head -1)" ] && break; sleep 0.1; done
rcli config resetstat >/dev/null
before=$(round_trips)
redis=$(run)
after=$(round_trips)
printf '%-28s %s\n' "paid chat, stores in Redis" "$redis"
stop_gateway

served=$(field requests "$redis")
bad=$(field unexpected "$redis")
awk -v m="$(field rps "$memory")" -v r="$(field rps "$redis")" -v calls=$((after - before)) -v ok=$((served - bad)) \
  'BEGIN { printf "ratio Redis/memory: %.2fx; Redis scripts (round trips) per paid request: %.2f (%d scripts, %d paid answers)\n", r / m, calls / ok, calls, ok }'
echo "load after: $(uptime | sed 's/.*load average/load average/')"
