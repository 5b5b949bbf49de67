#!/usr/bin/env bash
# Requests per second of the gateway reference server on loopback, with wrk:
#   1. unpaid quote (402) of a paid chat request
#   2. paid chat, verified locally (EIP-3009 recovery) and settled on the dev ledger,
#      each request with its own pre-signed PAYMENT-SIGNATURE
#   3. free chat (free-tier limit raised out of the way)
#   4. GET /v1/models
# all against one server. Bounded: LOAD_DURATION per run (default 5s), at most
# LOAD_PAID_COUNT pre-signed payments (default 60000). Needs wrk (apt-get install -y wrk).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${LOAD_DURATION:-5s}
threads=${LOAD_THREADS:-2}
connections=${LOAD_CONNECTIONS:-32}
paid_count=${LOAD_PAID_COUNT:-60000}
port=${LOAD_PORT:-18402}
target=${CARGO_TARGET_DIR:-target}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
. scripts/load/gateway_features.sh
# shellcheck source=load/wait_ready.sh
. scripts/load/wait_ready.sh
cargo build --quiet --release --features "$gateway_features" --example gateway --example gateway_presign

work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

GATEWAY_LISTEN="127.0.0.1:$port" \
GATEWAY_FREE_PER_MINUTE=4194303 GATEWAY_FREE_PER_HOUR=4194303 RUST_LOG="${RUST_LOG:-warn}" \
  "$target/release/examples/gateway" >"$work/server.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
wait_ready "$base" "$work/server.log"

paid_body='{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'
free_body='{"model":"nvidia/nemotron-super","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'

# shellcheck source=load/expect_status.sh
. scripts/load/expect_status.sh
run() { # name method path expect body [payments]
  local name=$1 method=$2 path=$3 expect=$4 body=$5 payments=${6:-}
  local line
  [ -n "$payments" ] || expect_status "$name" "$method" "$base$path" "$expect" "$body"
  line=$(LOAD_METHOD=$method LOAD_BODY=$body LOAD_EXPECT=$expect LOAD_PAYMENTS=$payments LOAD_THREADS=$threads \
    wrk -t"$threads" -c"$connections" -d"$duration" -s scripts/load/gateway.lua "$base$path" | grep LOAD_RESULT)
  printf '%-34s %s\n' "$name" "${line#LOAD_RESULT }"
}

echo "wrk: $threads threads, $connections connections, $duration per run, server and wrk on the same machine"
run "unpaid quote (402)" POST /v1/chat/completions 402 "$paid_body"

quote=$(curl -s -o /dev/null -D - -H 'content-type: application/json' -d "$paid_body" "$base/v1/chat/completions" \
  | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required" {print $2}')
"$target/release/examples/gateway_presign" "$quote" "$paid_count" "$work/payments.txt"
run "paid chat (local verify + settle)" POST /v1/chat/completions 200 "$paid_body" "$work/payments.txt"

run "free chat" POST /v1/chat/completions 200 "$free_body"
run "GET /v1/models" GET /v1/models 200 ""
