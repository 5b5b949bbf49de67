#!/usr/bin/env bash
# Side by side on loopback: walletgate's gateway example against a server built
# on the published x402-axum crate (benches/peer), same quote terms, both
# verifying and settling in-process (EIP-712 recovery, payTo, exact value, time
# window, single-use nonce, balance on a ledger pre-funding the public dev
# accounts).
#
# Per round, each server in turn (the order alternates between rounds): start it
# on a free loopback port, run three wrk cells against it, stop it:
#   1. GET /v1/models
#   2. unpaid quote: POST /v1/chat/completions without payment (402)
#   3. paid chat: the same POST with a fresh pre-signed PAYMENT-SIGNATURE per
#      request (signed before the cell by examples/gateway_presign.rs from the
#      server's own quote; never reused)
# then prints per path: req/s of each, ratio walletgate / x402-axum, p50 and p99
# (medians over the rounds).
#
# Both servers are built here in release mode with `nice`, the peer in its own
# target dir (benches/peer/target). CI neither builds nor runs this. Needs wrk
# (apt-get install -y wrk) and curl. The raw output is also written to
# benches/results/<UTC time>-bench-vs-x402-axum.txt. Bounded: BENCH_ROUNDS x 2 servers x 3 cells
# of BENCH_DURATION each, at most BENCH_PAID_COUNT payments per paid cell.
#
#   BENCH_ROUNDS       rounds (default 2, at least 1)
#   BENCH_DURATION     wrk duration of one cell (default 8s)
#   BENCH_THREADS      wrk threads (default 2)
#   BENCH_CONNECTIONS  wrk connections (default 32)
#   BENCH_PAID_COUNT   payments signed per paid cell (default 300000; a cell
#                      that runs out says exhausted=1 and its figure is low)
#
# `--one-core`: each server on core 1 alone (taskset -c 1), wrk on core 0 with
# one thread (taskset -c 0 wrk -t1), so a server's throughput is the inverse
# of its own CPU per request, whatever the generator costs. Beside throughput
# it prints the server's CPU per request (utime + stime of its pid in
# /proc/PID/stat over the cell, divided by the cell's requests). After the
# rounds it measures tail latency at a fixed offered rate: FIXED_RATE_SHARE
# (default 70%) of the lower of the two servers' median paid throughput, sent
# by a constant-rate generator (benches/peer's open_loop, latency from each
# request's intended send time), one fresh payment per request, each server
# on core 1 and the generator on core 0, BENCH_FIXED_DURATION (default 20) s
# per server, both orders:
#   BENCH_FIXED_DURATION  seconds of the fixed-rate cell (default 20)
#   BENCH_FIXED_SHARE     percent of the lower paid throughput (default 70)
#   BENCH_FIXED_RATE      an explicit rate in req/s instead (smoke tests)
#
# Both modes pin what the gateway measures, so a later feature cannot move the
# baseline silently: memory stores (no GATEWAY_REDIS_URL), the development
# ledger (no GATEWAY_FACILITATOR_URL, no settler), GATEWAY_PAYMENT_ID=off,
# GATEWAY_SIWX=off, GATEWAY_BAZAAR=off, and GATEWAY_UPTO=off GATEWAY_MPP=off: the
# quote x402-axum answers carries one `exact` offer and no MPP challenge, so
# the gateway's quote must not carry more either.
set -euo pipefail
cd "$(dirname "$0")/.."

one_core=0
for arg in "$@"; do
  case $arg in
    --one-core) one_core=1 ;;
    *) echo "usage: $0 [--one-core]" >&2; exit 2 ;;
  esac
done
rounds=${BENCH_ROUNDS:-2}
duration=${BENCH_DURATION:-8s}
if [ "$one_core" = 1 ]; then
  threads=1
  [ "$(nproc)" -ge 2 ] || { echo "--one-core needs two CPUs (0 and 1)" >&2; exit 1; }
  server_pin=(taskset -c 1)
  load_pin=(taskset -c 0)
else
  threads=${BENCH_THREADS:-2}
  server_pin=()
  load_pin=()
fi
fixed_duration=${BENCH_FIXED_DURATION:-20}
fixed_share=${BENCH_FIXED_SHARE:-70}
connections=${BENCH_CONNECTIONS:-32}
paid_count=${BENCH_PAID_COUNT:-300000}
target=${CARGO_TARGET_DIR:-target}
peer_target=benches/peer/target

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing" >&2; exit 1; }
[ "$rounds" -ge 1 ] && [ "$rounds" -le 10 ] || { echo "BENCH_ROUNDS must be 1..10" >&2; exit 1; }

mkdir -p benches/results
raw=benches/results/$(date -u +%Y-%m-%dT%H%M%SZ)-bench-vs-x402-axum.txt
exec > >(tee "$raw") 2>&1

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "building (release, nice -n 15): walletgate gateway example, presigner, x402-axum peer"
. scripts/load/gateway_features.sh
nice -n 15 cargo build --quiet --release --features "$gateway_features" --example gateway --example gateway_presign
CARGO_TARGET_DIR=$peer_target nice -n 15 cargo build --quiet --release --manifest-path benches/peer/Cargo.toml
open_loop_bin=$peer_target/release/open_loop

gateway_bin=$target/release/examples/gateway
presign_bin=$target/release/examples/gateway_presign
peer_bin=$peer_target/release/walletgate-peer

work=$(mktemp -d)
# shellcheck source=load/server.sh
. scripts/load/server.sh
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

paid_body='{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}'
chat=/v1/chat/completions

free_port() { # a loopback port nothing listens on, below the ephemeral range
  local port
  for port in $(shuf -i 20000-32000 -n 50); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "no free loopback port found" >&2
  return 1
}

# shellcheck source=load/wait_ready.sh
. scripts/load/wait_ready.sh

quote_of() { # base -> the PAYMENT-REQUIRED value of an unpaid chat
  curl -s -o /dev/null -D - -H 'content-type: application/json' -d "$paid_body" "$1$chat" \
    | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required" {print $2}'
}

json_field() { # decoded JSON, field name -> its string (without escapes) or number value
  sed -n -e "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" -e "t" -e "s/.*\"$2\":\([0-9][0-9]*\).*/\1/p" <<<"$1" | head -n 1
}

start_gateway() { # port
  env -u GATEWAY_REDIS_URL -u GATEWAY_FACILITATOR_URL -u GATEWAY_EVM_RPC_URL -u GATEWAY_SETTLER_KEY_FILE \
    -u GATEWAY_FAULTS -u GATEWAY_MAX_TIMEOUT_SECS \
    GATEWAY_PAYMENT_ID=off GATEWAY_SIWX=off GATEWAY_BAZAAR=off GATEWAY_UPTO=off GATEWAY_MPP=off \
    GATEWAY_LISTEN="127.0.0.1:$1" GATEWAY_FREE_PER_MINUTE=4194303 GATEWAY_FREE_PER_HOUR=4194303 RUST_LOG="${RUST_LOG:-warn}" \
    "${server_pin[@]}" "$gateway_bin" >"$work/gateway.log" 2>&1 &
  server=$!
  wait_ready "http://127.0.0.1:$1" "$work/gateway.log"
}
start_peer() { # port
  PEER_LISTEN="127.0.0.1:$1" PEER_PAY_TO="$pay_to" PEER_AMOUNT_UNITS="$amount" \
    PEER_MAX_TIMEOUT_SECONDS="$max_timeout" PEER_DESCRIPTION="$description" \
    PEER_MODELS_FILE="$work/models.json" \
    "${server_pin[@]}" "$peer_bin" >"$work/peer.log" 2>&1 &
  server=$!
  wait_ready "http://127.0.0.1:$1" "$work/peer.log"
}

# The peer quotes what the gateway quotes and lists what it lists: read them once.
port=$(free_port)
start_gateway "$port"
curl -fs -o "$work/models.json" "http://127.0.0.1:$port/v1/models"
gateway_quote=$(base64 -d <<<"$(quote_of "http://127.0.0.1:$port")")
stop_server
amount=$(json_field "$gateway_quote" amount)
pay_to=$(json_field "$gateway_quote" payTo)
max_timeout=$(json_field "$gateway_quote" maxTimeoutSeconds)
description=$(json_field "$gateway_quote" description)
network=$(json_field "$gateway_quote" network)
asset=$(json_field "$gateway_quote" asset)
echo "terms (from the gateway's quote): $amount units of $asset on $network to $pay_to, maxTimeoutSeconds $max_timeout"
[ "$network" = "eip155:84532" ] && [ "$asset" = "0x036CbD53842c5426634e7929541eC2318f3dCF7e" ] \
  || { echo "the gateway quotes other terms than the peer can: $gateway_quote" >&2; exit 1; }
if [ "$one_core" = 1 ]; then
  echo "one core each: servers on CPU 1 (taskset -c 1), wrk -t1 on CPU 0; $connections connections, $duration per cell, $rounds rounds"
else
  echo "wrk: $threads threads, $connections connections, $duration per cell, $rounds rounds, servers and wrk on the same machine"
fi
echo "gateway configuration: memory stores, development ledger, GATEWAY_PAYMENT_ID=off GATEWAY_SIWX=off GATEWAY_BAZAAR=off GATEWAY_UPTO=off GATEWAY_MPP=off"
echo

results=$work/results.tsv # round server path rps p50 p99 unexpected exhausted cpu_us_per_request
cpu_ticks() { # pid -> utime + stime in clock ticks
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}
ticks_per_second=$(getconf CLK_TCK)
# shellcheck source=load/expect_status.sh
. scripts/load/expect_status.sh
cell() { # round server path-name base method path expect body [payments]
  local round=$1 name=$2 path_name=$3 base=$4 method=$5 path=$6 expect=$7 body=$8 payments=${9:-}
  local line
  # The paid cell's probe is a payment of its own, sent by measure.
  [ -n "$payments" ] || expect_status "$name" "$method" "$base$path" "$expect" "$body"
  local ticks_before ticks_after
  ticks_before=$(cpu_ticks "$server")
  line=$(LOAD_METHOD=$method LOAD_BODY=$body LOAD_EXPECT=$expect LOAD_PAYMENTS=$payments LOAD_THREADS=$threads \
    "${load_pin[@]}" wrk -t"$threads" -c"$connections" -d"$duration" -s scripts/load/gateway.lua "$base$path" | grep LOAD_RESULT) \
    || { echo "wrk gave no result for $name $path_name" >&2; exit 1; }
  ticks_after=$(cpu_ticks "$server")
  local field rps p50 p99 unexpected exhausted requests=0 cpu
  for field in ${line#LOAD_RESULT }; do
    case $field in
      requests=*) requests=${field#requests=} ;;
      rps=*) rps=${field#rps=} ;;
      p50_ms=*) p50=${field#p50_ms=} ;;
      p99_ms=*) p99=${field#p99_ms=} ;;
      unexpected=*) unexpected=${field#unexpected=} ;;
      exhausted=*) exhausted=${field#exhausted=} ;;
    esac
  done
  cpu=$(awk -v t="$((ticks_after - ticks_before))" -v hz="$ticks_per_second" -v n="$requests" \
    'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }')
  printf 'round %s  %-10s %-12s %s cpu_us_per_request=%s\n' "$round" "$name" "$path_name" "${line#LOAD_RESULT }" "$cpu"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$path_name" "$rps" "$p50" "$p99" "$unexpected" "$exhausted" "$cpu" >>"$results"
}

measure() { # round server-name
  local round=$1 name=$2 base
  port=$(free_port)
  base="http://127.0.0.1:$port"
  if [ "$name" = walletgate ]; then start_gateway "$port"; else start_peer "$port"; fi
  cell "$round" "$name" models "$base" GET /v1/models 200 ""
  cell "$round" "$name" quote "$base" POST "$chat" 402 "$paid_body"
  # Fresh payments signed from this server's own quote, with this server idle.
  "$presign_bin" "$(quote_of "$base")" "$((paid_count + 1))" "$work/signed.txt" 2>"$work/presign.log" \
    || { cat "$work/presign.log" >&2; exit 1; }
  head -n 1 "$work/signed.txt" >"$work/probe.txt"
  tail -n +2 "$work/signed.txt" >"$work/payments.txt"
  local probe
  probe=$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
    -H "PAYMENT-SIGNATURE: $(cat "$work/probe.txt")" -d "$paid_body" "$base$chat")
  [ "$probe" = 200 ] || { echo "$name refused a fresh payment (HTTP $probe)" >&2; exit 1; }
  cell "$round" "$name" paid "$base" POST "$chat" 200 "$paid_body" "$work/payments.txt"
  rm -f "$work/signed.txt" "$work/payments.txt"
  stop_server
}

for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then order="walletgate x402-axum"; else order="x402-axum walletgate"; fi
  for name in $order; do
    measure "$round" "$name"
  done
done

echo
echo "medians over $rounds rounds (req/s; latency in ms)"
awk -F'\t' '
  function median(list,    n, parts, i, j, t) {
    n = split(list, parts, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (parts[j] + 0 < parts[i] + 0) { t = parts[i]; parts[i] = parts[j]; parts[j] = t }
    return n % 2 ? parts[(n + 1) / 2] : (parts[n / 2] + parts[n / 2 + 1]) / 2
  }
  {
    key = $2 SUBSEP $3
    rps[key] = rps[key] " " $4; p50[key] = p50[key] " " $5; p99[key] = p99[key] " " $6
    cpu[key] = cpu[key] " " $9
    bad[key] += $7; out[key] += $8
  }
  END {
    printf "%-8s %12s %12s %7s %9s %9s %9s %9s %9s %9s %s\n", "path", "walletgate", "x402-axum", "ratio", "wg p50", "peer p50", "wg p99", "peer p99", "wg cpu", "peer cpu", "notes"
    split("models quote paid", paths, " ")
    for (i = 1; i <= 3; i++) {
      w = "walletgate" SUBSEP paths[i]; x = "x402-axum" SUBSEP paths[i]
      wr = median(rps[w]); xr = median(rps[x])
      note = ""
      if (bad[w] + bad[x] > 0) note = note sprintf("unexpected statuses: walletgate %d, x402-axum %d; ", bad[w], bad[x])
      if (out[w] + out[x] > 0) note = note "ran out of payments (raise BENCH_PAID_COUNT); "
      printf "%-8s %12.0f %12.0f %7.2f %9.2f %9.2f %9.2f %9.2f %9.1f %9.1f %s\n", paths[i], wr, xr, (xr > 0 ? wr / xr : 0), \
        median(p50[w]), median(p50[x]), median(p99[w]), median(p99[x]), median(cpu[w]), median(cpu[x]), note
    }
  }' "$results"
echo "(cpu: the server's utime + stime per request, microseconds, from /proc)"

if [ "$one_core" = 1 ]; then
  rate=${BENCH_FIXED_RATE:-}
  if [ -z "$rate" ]; then
    rate=$(awk -F'\t' -v share="$fixed_share" '
      $3 == "paid" { list[$2] = list[$2] " " $4 }
      function median(l,    n, p, i, j, t) {
        n = split(l, p, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (p[j] + 0 < p[i] + 0) { t = p[i]; p[i] = p[j]; p[j] = t }
        return n % 2 ? p[(n + 1) / 2] : (p[n / 2] + p[n / 2 + 1]) / 2
      }
      END { a = median(list["walletgate"]); b = median(list["x402-axum"]); low = a < b ? a : b; printf "%d", low * share / 100 }' "$results")
  fi
  echo
  echo "fixed offered rate: $rate paid req/s for ${fixed_duration}s per server (constant-rate open_loop on CPU 0, $connections connections, latency from each request's intended send time; server on CPU 1)"
  fixed() { # server-name
    local name=$1 base line ticks_before ticks_after sent
    port=$(free_port)
    base="http://127.0.0.1:$port"
    if [ "$name" = walletgate ]; then start_gateway "$port"; else start_peer "$port"; fi
    "$presign_bin" "$(quote_of "$base")" "$((rate * fixed_duration + 1))" "$work/signed.txt" 2>"$work/presign.log" \
      || { cat "$work/presign.log" >&2; exit 1; }
    ticks_before=$(cpu_ticks "$server")
    line=$("${load_pin[@]}" "$open_loop_bin" "$base$chat" "$rate" "$fixed_duration" "$connections" POST 200 \
      "$paid_body" "$work/signed.txt" | grep OPEN_LOOP_RESULT) \
      || { echo "open_loop gave no result for $name" >&2; exit 1; }
    ticks_after=$(cpu_ticks "$server")
    sent=$(grep -oE ' sent=[0-9]+' <<<"$line" | cut -d= -f2)
    printf '%-10s %s cpu_us_per_request=%s\n' "$name" "${line#OPEN_LOOP_RESULT }" \
      "$(awk -v t="$((ticks_after - ticks_before))" -v hz="$ticks_per_second" -v n="$sent" 'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }')"
    rm -f "$work/signed.txt"
    stop_server
  }
  fixed walletgate
  fixed x402-axum
  fixed x402-axum
  fixed walletgate
  echo "(each server twice, in both orders; compare p99_ms; a send_lag_p99_ms near p99 means the generator fell behind)"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (figures from a busy machine are noisy)"
echo "quote: walletgate answers the 402 with three headers and a JSON body; x402-axum 2.0.2 with one header and an empty body"
echo "raw output: $raw"
