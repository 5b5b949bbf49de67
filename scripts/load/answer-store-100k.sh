#!/usr/bin/env bash
# The answer store's bound under 100,000 distinct payment identifiers, through
# the gateway example on loopback (issue 30): each request is a fresh signed
# payment under its own `payment-identifier` id, so each settled answer is
# kept under its id and (sign-in-with-x on) under its payer and operation, in
# the in-memory answer store bounded by GATEWAY_ANSWER_STORE_BYTES (8 MiB
# here). Reports the store's held bytes (the walletgate_x402_answer_store_bytes
# gauge on GATEWAY_METRICS_LISTEN's page, feature `metrics`) and the process's
# RSS before and after. Only the memory figures mean anything on a shared
# machine, never the timing. GATEWAY_SIWX=off in the environment compares
# the run without sign-in-with-x (no entitlements, no answers kept for it).
#
# Bounded: at most ANSWER_LOAD_COUNT payments (default and most 100000), wrk
# for at most ANSWER_LOAD_SECONDS (default 600). Loopback only. Needs wrk.
set -euo pipefail
cd "$(dirname "$0")/../.."

count=${ANSWER_LOAD_COUNT:-100000}
seconds=${ANSWER_LOAD_SECONDS:-600}
store_bytes=${ANSWER_LOAD_STORE_BYTES:-8388608}
threads=${LOAD_THREADS:-2}
connections=${LOAD_CONNECTIONS:-16}
port=${LOAD_PORT:-18412}
metrics_port=${LOAD_METRICS_PORT:-18413}
target=${CARGO_TARGET_DIR:-target}
[ "$count" -ge 1 ] && [ "$count" -le 100000 ] || { echo "ANSWER_LOAD_COUNT must be 1..=100000" >&2; exit 1; }
[ "$seconds" -ge 1 ] && [ "$seconds" -le 1800 ] || { echo "ANSWER_LOAD_SECONDS must be 1..=1800" >&2; exit 1; }

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }

. scripts/load/gateway_features.sh
# shellcheck source=load/wait_ready.sh
. scripts/load/wait_ready.sh
cargo build --quiet --release --features "$gateway_features,metrics" --example gateway --example gateway_presign

work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

env -u GATEWAY_REDIS_URL GATEWAY_LISTEN="127.0.0.1:$port" GATEWAY_METRICS_LISTEN="127.0.0.1:$metrics_port" \
GATEWAY_ANSWER_STORE_BYTES="$store_bytes" GATEWAY_PAYMENT_ID=optional RUST_LOG="${RUST_LOG:-warn}" \
  "$target/release/examples/gateway" >"$work/server.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
wait_ready "$base" "$work/server.log"

rss() { awk '/^VmRSS:/ {print $2 " kB"}' "/proc/$server/status"; }
peak() { awk '/^VmHWM:/ {print $2 " kB"}' "/proc/$server/status"; }
held() {
  curl -fs "http://127.0.0.1:$metrics_port/metrics" \
    | awk '$1 == "walletgate_x402_answer_store_bytes" {printf "%d bytes\n", $2}'
}

paid_body='{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'
quote=$(curl -s -o /dev/null -D - -H 'content-type: application/json' -d "$paid_body" "$base/v1/chat/completions" \
  | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required" {print $2}')
"$target/release/examples/gateway_presign" "$quote" "$count" "$work/payments.txt" --payment-ids

# One paid request first: the answer's size, and a kept answer for the gauge to show.
first=$(head -n1 "$work/payments.txt")
answer_bytes=$(curl -s -o /dev/null -w '%{size_download}' -H 'content-type: application/json' \
  -H "PAYMENT-SIGNATURE: $first" -d "$paid_body" "$base/v1/chat/completions")
tail -n +2 "$work/payments.txt" >"$work/rest.txt"

echo "machine: $(nproc) CPUs (shared: only the memory figures count)"
echo "payments: $count, each under its own payment-identifier id; GATEWAY_ANSWER_STORE_BYTES=$store_bytes"
echo "one paid answer's body: $answer_bytes bytes"
echo "before: rss $(rss), answer store $(held)"
settled() {
  curl -fs "http://127.0.0.1:$metrics_port/metrics" \
    | awk '$1 == "walletgate_x402_settlements_total" {found = $2} END {print found + 0}'
}
LOAD_METHOD=POST LOAD_BODY=$paid_body LOAD_EXPECT=200 LOAD_PAYMENTS="$work/rest.txt" LOAD_THREADS=$threads \
  wrk -t"$threads" -c"$connections" -d"${seconds}s" -s scripts/load/gateway.lua "$base/v1/chat/completions" \
  >"$work/wrk.out" &
wrk_pid=$!
# wrk runs its whole duration even once its payments are spent: stop it
# (SIGINT: it still prints its summary) when every payment settled, or when
# settlements stop for five seconds (a request wrk abandons as its thread
# stops is not settled).
last=-1 still=0
while kill -0 "$wrk_pid" 2>/dev/null; do
  now=$(settled)
  [ "$now" -ge "$count" ] && break
  if [ "$now" -eq "$last" ]; then still=$((still + 1)); else still=0; fi
  [ "$still" -ge 5 ] && break
  last=$now
  sleep 1
done
kill -INT "$wrk_pid" 2>/dev/null || true
wait "$wrk_pid" || true
line=$(grep LOAD_RESULT "$work/wrk.out" || true)
echo "wrk: ${line#LOAD_RESULT }"
echo "settled: $(settled)"
echo "after: rss $(rss) (peak $(peak)), answer store $(held)"
