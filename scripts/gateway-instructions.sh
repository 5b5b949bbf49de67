#!/usr/bin/env bash
# Instructions the gateway example spends per request, counted by valgrind's
# callgrind on the release build: independent of the machine's load, so it
# can run while other work shares the cores (wrk timings cannot).
#
#   scripts/gateway-instructions.sh [N] [CASE...]     (default N = 2000, every case)
#   GATEWAY_BIN=PATH scripts/gateway-instructions.sh …  (that binary, not this tree's build)
#
# Cases, each on keep-alive connection(s) from a client outside valgrind:
#   models      GET /v1/models
#   quote-off   the 402 of a paid chat request, GATEWAY_SIWX=off GATEWAY_PAYMENT_ID=off
#   quote-on    the same 402 with sign-in-with-x and payment-identifier declared
#               (GATEWAY_SIWX=on GATEWAY_PAYMENT_ID=optional)
#   paid        the paid chat, a fresh payment per request (pre-signed by
#               examples/gateway_presign from the server's own quote), verified
#               and settled on the development ledger, both extensions off
# Each case pins the rest as scripts/bench-vs-x402-axum.sh does (memory stores,
# development ledger, GATEWAY_BAZAAR=off GATEWAY_UPTO=off GATEWAY_MPP=off,
# GATEWAY_PUBLIC_URL set) and runs the
# gateway under callgrind: 200 warm-up requests, the counters zeroed
# (callgrind_control -z), N requests, the counters dumped. Per request is the
# dump's total over N; below it, per function, its inclusive counts over N
# (the largest 30). CALLGRIND_KEEP=DIR keeps the dumps there (for
# `scripts/callgrind_delta.py --self DUMP - N` and callgrind_annotate).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-2000}
shift || true
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(models quote-off quote-on)
warm=200
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 1; }

# GATEWAY_BIN=PATH measures a gateway built elsewhere (another commit's, say).
gateway_bin=${GATEWAY_BIN:-}
if [ -z "$gateway_bin" ]; then
  . scripts/load/gateway_features.sh
  nice -n 15 cargo build --quiet --release --features "$gateway_features" --example gateway --example gateway_presign
  gateway_bin=${CARGO_TARGET_DIR:-target}/release/examples/gateway
fi
presign_bin=$(dirname "$gateway_bin")/gateway_presign
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Sends `count` requests of `case` to the gateway at port, on one keep-alive
# connection, each answer read whole and its status checked; a paid request
# takes the next payment of the file `payments`.
send() { # case port count [payments]
  python3 - "$@" <<'PY'
import http.client, sys
case, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payments = open(sys.argv[4]).read().split() if len(sys.argv) > 4 else []
body = b'{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
want = 402 if case.startswith("quote") else 200
for _ in range(count):
    if case == "models":
        connection.request("GET", "/v1/models")
    else:
        headers = {"Content-Type": "application/json"}
        if case == "paid":
            headers["Payment-Signature"] = payments.pop()
        connection.request("POST", "/v1/chat/completions", body, headers)
    response = connection.getresponse()
    response.read()
    if response.status != want:
        sys.exit(f"{case}: status {response.status}, wanted {want}")
connection.close()
PY
}

# The 402's declared extensions, to show what a case measured.
declared() { # port
  curl -s -D - -o /dev/null -H 'content-type: application/json' \
    -d '{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"x"}]}' \
    "http://127.0.0.1:$1/v1/chat/completions" \
    | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required"{print $2}' | base64 -d 2>/dev/null \
    | python3 -c 'import json,sys; print(",".join(sorted((json.load(sys.stdin).get("extensions") or {}).keys())) or "none")'
}

run() { # case -> the path of the dump of its N requests
  local case=$1 port extensions
  port=$(free_port)
  case $case in
    quote-on) extensions=(GATEWAY_SIWX=on GATEWAY_PAYMENT_ID=optional) ;;
    *) extensions=(GATEWAY_SIWX=off GATEWAY_PAYMENT_ID=off) ;;
  esac
  local out="$work/$case.out"
  env -u GATEWAY_REDIS_URL -u GATEWAY_FACILITATOR_URL -u GATEWAY_EVM_RPC_URL -u GATEWAY_SETTLER_KEY_FILE \
    -u GATEWAY_FAULTS -u GATEWAY_MAX_TIMEOUT_SECS -u GATEWAY_SIWX_KEY_FILE \
    "${extensions[@]}" GATEWAY_BAZAAR=off GATEWAY_UPTO=off GATEWAY_MPP=off GATEWAY_LISTEN="127.0.0.1:$port" \
    GATEWAY_PUBLIC_URL="http://127.0.0.1:$port" GATEWAY_DRAIN_SECS=5 \
    GATEWAY_FREE_PER_MINUTE=4194303 GATEWAY_FREE_PER_HOUR=4194303 RUST_LOG=warn \
    valgrind --tool=callgrind --callgrind-out-file="$out" "$gateway_bin" >"$work/gateway.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
    sleep 0.1
  done
  [ "$case" = models ] || echo "  ($case declares: $(declared "$port"))" >&2
  local payments=()
  if [ "$case" = paid ]; then
    local quote
    quote=$(curl -s -D - -o /dev/null -H 'content-type: application/json' \
      -d '{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"x"}]}' \
      "http://127.0.0.1:$port/v1/chat/completions" | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required"{print $2}')
    "$presign_bin" "$quote" "$((warm + count))" "$work/payments" 2>/dev/null
    head -n "$warm" "$work/payments" >"$work/warm-payments"
    tail -n "$count" "$work/payments" >"$work/counted-payments"
    payments=("$work/warm-payments")
  fi
  send "$case" "$port" "$warm" "${payments[@]}"
  callgrind_control -z "$pid" >/dev/null 2>&1
  [ "$case" != paid ] || payments=("$work/counted-payments")
  send "$case" "$port" "$count" "${payments[@]}"
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill -TERM "$pid"
  wait "$pid" || true
  echo "$out.1"
}

total() { awk '/^summary:|^totals:/ { print $2; exit }' "$1"; }

echo "instructions per request (callgrind, gateway example, release; N=$count after $warm warm-up requests)"
for case in "${cases[@]}"; do
  dump=$(run "$case")
  awk -v c="$case" -v n="$count" -v t="$(total "$dump")" 'BEGIN { printf "%-10s %10.0f\n", c, t / n }'
  python3 scripts/callgrind_delta.py "$dump" - "$count" 30 > "$work/$case.functions"
  [ -z "${CALLGRIND_KEEP:-}" ] || { mkdir -p "$CALLGRIND_KEEP"; cp "$dump" "$CALLGRIND_KEEP/$case.out"; }
done
for case in "${cases[@]}"; do
  echo
  echo "$case, per request, inclusive, by function (over N; the largest 30):"
  cat "$work/$case.functions"
done
