#!/usr/bin/env bash
# The quote path's throughput with sign-in-with-x and payment-identifier
# declared against both off (GATEWAY_SIWX=off GATEWAY_PAYMENT_ID=off), the
# figure of the pay-once issue's "within 5%".
#
# Both gateways run at once on core 1 (taskset -c 1, bazaar off, memory stores,
# GATEWAY_PUBLIC_URL set so SIWX is declared); wrk loads one of them at a time
# from core 0 (-t1 -c32, the unpaid POST /v1/chat/completions, a 402 each) in
# short bursts, alternating on/off and swapping the order every round. A host
# whose speed drifts over a minute (a shared VM does) then slows both sides of
# each pair alike, which whole-run comparisons cannot promise. Prints each
# pair's ratio on/off and, at the end, their median and quartiles, and writes
# the output to benches/results/<UTC time>-quote-extensions.txt.
#
#   QUOTE_PAIRS   pairs of bursts (default 20, 1..200)
#   QUOTE_BURST   seconds per burst (default 2, 1..30)
#   GATEWAY_BIN   a gateway built elsewhere (default: this tree's, built here)
#
# Needs wrk (apt-get install -y wrk), curl and two cores. Bounded: QUOTE_PAIRS
# x 2 bursts of QUOTE_BURST seconds. CI neither builds nor runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${QUOTE_PAIRS:-20}
burst=${QUOTE_BURST:-2}
[[ $pairs =~ ^[0-9]+$ && $pairs -ge 1 && $pairs -le 200 ]] || { echo "QUOTE_PAIRS: 1..200" >&2; exit 2; }
[[ $burst =~ ^[0-9]+$ && $burst -ge 1 && $burst -le 30 ]] || { echo "QUOTE_BURST: 1..30" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
. scripts/load/wait_ready.sh

gateway_bin=${GATEWAY_BIN:-}
if [ -z "$gateway_bin" ]; then
  . scripts/load/gateway_features.sh
  nice -n 15 cargo build --quiet --release --features "$gateway_features" --example gateway
  gateway_bin=${CARGO_TARGET_DIR:-target}/release/examples/gateway
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

body='{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'
cat > "$work/quote.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

declare -A port
start() { # label env...
  local label=$1
  shift
  port[$label]=$(free_port)
  local base="http://127.0.0.1:${port[$label]}"
  env "$@" GATEWAY_BAZAAR=off GATEWAY_LISTEN="127.0.0.1:${port[$label]}" GATEWAY_PUBLIC_URL="$base" \
    GATEWAY_FREE_PER_MINUTE=4194303 GATEWAY_FREE_PER_HOUR=4194303 RUST_LOG=warn \
    taskset -c 1 "$gateway_bin" > "$work/$label.log" 2>&1 &
  pids+=($!)
  wait_ready "$base" "$work/$label.log"
  # What its 402 declares, so a run never compares two alike servers.
  curl -s -D - -o /dev/null -H 'content-type: application/json' -d "$body" "$base/v1/chat/completions" |
    tr -d '\r' | awk -F': ' 'tolower($1) == "payment-required" { print $2 }' | base64 -d |
    python3 -c 'import json, sys; print(",".join(sorted((json.load(sys.stdin).get("extensions") or {}).keys())) or "none")'
}

burst_rps() { # label
  taskset -c 0 wrk -t1 -c32 -d"${burst}s" -s "$work/quote.lua" \
    "http://127.0.0.1:${port[$1]}/v1/chat/completions" | awk '/Requests\/sec/ { print $2 }'
}

out=benches/results/$(date -u +%Y-%m-%dT%H%M%SZ)-quote-extensions.txt
# Everything below runs in this shell (a `{ ...; } | tee` group would be a
# subshell, whose gateways the EXIT trap here would not know to stop).
exec > >(tee "$out")
echo "# scripts/quote-extensions.sh at $(git rev-parse --short HEAD), $(date -u '+%F %H:%M') UTC:" \
  "$pairs pairs of ${burst} s bursts, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'on declares: '
start on GATEWAY_SIWX=on GATEWAY_PAYMENT_ID=optional
printf 'off declares: '
start off GATEWAY_SIWX=off GATEWAY_PAYMENT_ID=off
burst_rps on > /dev/null # both warm before the first pair
burst_rps off > /dev/null
ratios=()
for pair in $(seq "$pairs"); do
  if ((pair % 2)); then
    on=$(burst_rps on)
    off=$(burst_rps off)
  else
    off=$(burst_rps off)
    on=$(burst_rps on)
  fi
  ratio=$(python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.3f}")' "$on" "$off")
  ratios+=("$ratio")
  printf 'pair %s: on %.0f off %.0f ratio %s\n' "$pair" "$on" "$off" "$ratio"
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
ratios = sorted(float(r) for r in sys.argv[1:])
q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
print(f"ratio on/off over {len(ratios)} pairs: median {statistics.median(ratios):.3f},"
      f" quartiles {q[0]:.3f}-{q[2]:.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}")
PY
