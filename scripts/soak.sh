#!/usr/bin/env bash
# Soak test of the gateway reference server on loopback: a warm-up, then
# SECONDS of each kind of traffic (default 60), one after the other, against
# one server:
#   quote  unpaid paid-model POST, answered 402 with a quote
#   paid   each request with its own pre-signed payment (verified locally,
#          settled on the dev ledger)
#   free   free-model POST (free-tier quotas raised out of the way: one
#          loopback client)
# wrk runs in back-to-back 5 s slices; after each slice the script records the
# slice's requests per second, the server's resident set size (VmRSS) and the
# machine's 1-minute load average.
#
# How it judges, per kind:
# - Warm-up first: SOAK_WARMUP_SECS (default 40) of the same traffic, printed,
#   not judged. The first slices of a fresh run are slower (the allocator's
#   arenas, the tables and the kernel's socket buffers grow, connections are
#   new) and, for paid traffic, memory grows by design until the replay store
#   holds every authorization still valid: each is remembered until its
#   validBefore, at most the quote's maxTimeoutSeconds (plus 60 s clock skew).
#   The soak's gateway quotes GATEWAY_MAX_TIMEOUT_SECS=SOAK_MAX_TIMEOUT_SECS
#   (default 30) so that plateau is reached within the warm-up: memory then
#   follows the rate times 30 s, not the run's length. (With the default 300 s
#   it would plateau after 5 minutes, at 10 times the size.) The paid warm-up
#   lasts at least twice that retention plus 20 s: the replay store's tables
#   grow in doublings, and the last one comes when the live set peaks, which
#   takes a full retention period and the rate's ups and downs after it.
# - Throughput flat: the mean of the last 10 s within 10% of the first 10 s
#   after the warm-up (either way: a rise is reported as well as a decline).
# - Memory: RSS growth under 10% from the end of the warm-up to the end.
# Paid payments are signed just before each slice (validBefore = signing time
# + the quote's maxTimeoutSeconds), so a slice never sends an expired one, if
# signing and the slice together take less than maxTimeoutSeconds - 6 s (a
# heavily loaded machine signs slowly: its refusals count as unexpected).
# The raw output is also written to benches/results/<UTC time>-soak-<N>s.txt.
#
#   scripts/soak.sh [--one-core] [SECONDS_PER_KIND]
#
# `--one-core`: the paid kind only, the gateway on CPU 1 alone (taskset -c 1)
# and wrk -t1 on CPU 0 (taskset -c 0), judged by the same rule (the paid
# warm-up of twice the replay retention + 20 s, then throughput flat within
# 10% and RSS growth under 10%). SOAK_KINDS (default "quote paid free", with
# --one-core "paid") chooses the kinds. The gateway runs the pinned
# configuration of scripts/bench-vs-x402-axum.sh: memory stores, development
# ledger, GATEWAY_PAYMENT_ID=off GATEWAY_SIWX=off GATEWAY_BAZAAR=off.
#
# Bounded: 3 x (warm-up + SECONDS) of load (the paid warm-up as above), at most SOAK_PAID_PER_SLICE
# pre-signed payments per paid slice (default 75000, i.e. up to 15k paid
# req/s; a slice that runs out says so). Stops the server on exit. Needs wrk.
set -euo pipefail
cd "$(dirname "$0")/.."

one_core=0
if [ "${1:-}" = --one-core ]; then
  one_core=1
  shift
fi
seconds=${1:-60}
slice=5
slices=$(( seconds / slice ))
if [ "$slices" -lt 4 ]; then
  echo "soak: SECONDS_PER_KIND must be at least $((4 * slice)) (two 10 s windows)" >&2
  exit 2
fi
warmup_slices=$(( ${SOAK_WARMUP_SECS:-40} / slice ))
max_timeout=${SOAK_MAX_TIMEOUT_SECS:-30}
paid_warmup_slices=$(( (2 * max_timeout + 20 + slice - 1) / slice ))
[ "$paid_warmup_slices" -lt "$warmup_slices" ] && paid_warmup_slices=$warmup_slices
if [ "$max_timeout" -lt $((slice + 10)) ]; then
  echo "soak: SOAK_MAX_TIMEOUT_SECS must be at least $((slice + 10)) (a payment outlives its slice)" >&2
  exit 2
fi
if [ "$one_core" = 1 ]; then
  threads=1
  kinds=${SOAK_KINDS:-paid}
  server_pin=(taskset -c 1)
  load_pin=(taskset -c 0)
else
  threads=${SOAK_THREADS:-2}
  kinds=${SOAK_KINDS:-quote paid free}
  server_pin=()
  load_pin=()
fi
connections=${SOAK_CONNECTIONS:-32}
paid_per_slice=${SOAK_PAID_PER_SLICE:-75000}
target=${CARGO_TARGET_DIR:-target}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }

mkdir -p benches/results
raw=benches/results/$(date -u +%Y-%m-%dT%H%M%SZ)-soak-$([ "$one_core" = 1 ] && echo one-core-)${seconds}s.txt
exec > >(tee "$raw") 2>&1

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$one_core" = 1 ] && echo "one core each: the gateway on CPU 1, wrk -t1 on CPU 0; kinds: $kinds"
echo "per kind: ${warmup_slices}x${slice}s warm-up (paid: ${paid_warmup_slices}x${slice}s; not judged), then ${seconds}s judged; quotes maxTimeoutSeconds $max_timeout"
. scripts/load/gateway_features.sh
# shellcheck source=load/wait_ready.sh
. scripts/load/wait_ready.sh
cargo build --quiet --release --features "$gateway_features" --example gateway --example gateway_presign

work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port: bind port 0 and read what the kernel chose.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
env -u GATEWAY_REDIS_URL -u GATEWAY_FACILITATOR_URL -u GATEWAY_EVM_RPC_URL -u GATEWAY_SETTLER_KEY_FILE \
  GATEWAY_PAYMENT_ID=off GATEWAY_SIWX=off GATEWAY_BAZAAR=off \
  GATEWAY_LISTEN="127.0.0.1:$port" GATEWAY_MAX_TIMEOUT_SECS="$max_timeout" \
  GATEWAY_FREE_PER_MINUTE=4194303 GATEWAY_FREE_PER_HOUR=4194303 RUST_LOG="${RUST_LOG:-warn}" \
  "${server_pin[@]}" "$target/release/examples/gateway" >"$work/server.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
wait_ready "$base" "$work/server.log"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$server/status"; }

paid_body='{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"soak test"}]}'
free_body='{"model":"nvidia/nemotron-super","max_tokens":64,"messages":[{"role":"user","content":"soak test"}]}'

# One slice of wrk; prints "rps unexpected exhausted".
slice_of() { # expect body [payments]
  local line
  line=$(LOAD_METHOD=POST LOAD_BODY=$2 LOAD_EXPECT=$1 LOAD_PAYMENTS=${3:-} LOAD_THREADS=$threads \
    "${load_pin[@]}" wrk -t"$threads" -c"$connections" -d"${slice}s" -s scripts/load/gateway.lua "$base/v1/chat/completions" \
    | grep LOAD_RESULT)
  local rps unexpected exhausted
  rps=$(echo "$line" | grep -oE 'rps=[0-9]+' | cut -d= -f2)
  unexpected=$(echo "$line" | grep -oE 'unexpected=[0-9]+' | cut -d= -f2)
  exhausted=$(echo "$line" | grep -oE 'exhausted=[0-9]+' | cut -d= -f2)
  echo "$rps $unexpected $exhausted"
}

# shellcheck source=load/expect_status.sh
. scripts/load/expect_status.sh
verdicts=()
soak() { # kind expect body
  local kind=$1 expect=$2 body=$3
  local quote="" warmup_slices=$warmup_slices
  if [ "$kind" = paid ]; then
    warmup_slices=$paid_warmup_slices
    quote=$(curl -s -o /dev/null -D - -H 'content-type: application/json' -d "$paid_body" "$base/v1/chat/completions" \
      | tr -d '\r' | awk -F': ' 'tolower($1)=="payment-required" {print $2}')
  fi
  [ "$kind" = paid ] || expect_status "$kind" POST "$base/v1/chat/completions" "$expect" "$body"
  echo "==> $kind: ${warmup_slices}x${slice}s warm-up, then ${seconds}s in ${slice}s slices ($threads wrk threads, $connections connections), RSS $(rss_kib) KiB before"
  local rates=() rss=() bad=0 ran_out=0 i rss_warm last_rps=""
  rss_warm=$(rss_kib)
  for i in $(seq 1 $((warmup_slices + slices))); do
    local payments=""
    if [ -n "$quote" ]; then
      # Signed now, valid for maxTimeoutSeconds from now: longer than the slice.
      # Twice what the last slice used (signing is not free; the rate may rise),
      # 25000 for the first (a warm-up slice: running out there is harmless).
      local count=$paid_per_slice
      if [ -z "$last_rps" ]; then
        [ "$count" -gt 25000 ] && count=25000
      elif [ $((last_rps * slice * 2 + 5000)) -lt "$count" ]; then
        count=$((last_rps * slice * 2 + 5000))
      fi
      payments=$work/payments.txt
      "$target/release/examples/gateway_presign" "$quote" "$count" "$payments" 2>/dev/null
    fi
    read -r rps unexpected exhausted < <(slice_of "$expect" "$body" "$payments")
    last_rps=$rps
    local label
    if [ "$i" -le "$warmup_slices" ]; then
      label="warm-up"
      rss_warm=$(rss_kib)
    else
      label="t=$(printf '%3d' $(((i - warmup_slices) * slice)))s"
      rates+=("$rps"); rss+=("$(rss_kib)")
      bad=$((bad + unexpected)); ran_out=$((ran_out + exhausted))
    fi
    printf '  %-8s %8s req/s  RSS %6s KiB  load %5s  unexpected %s%s\n' "$label" "$rps" "$(rss_kib)" \
      "$(cut -d' ' -f1 /proc/loadavg)" "$unexpected" "$([ "$exhausted" -gt 0 ] && echo '  (ran out of payments)')"
  done
  local verdict
  verdict=$(python3 - "$kind" "${rates[*]}" "$rss_warm ${rss[*]}" "$bad" "$ran_out" <<'PY'
import sys
kind, rates, rss, bad, ran_out = sys.argv[1], [float(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()], int(sys.argv[4]), int(sys.argv[5])
first, last = sum(rates[:2]) / 2, sum(rates[-2:]) / 2
drift = (last - first) / first * 100 if first else float("inf")
growth = (rss[-1] - rss[0]) / rss[0] * 100
flat = abs(drift) <= 10
lean = growth < 10
notes = []
if bad: notes.append(f"{bad} unexpected statuses")
if ran_out: notes.append("ran out of pre-signed payments")
print(f"{kind:<6} first 10 s {first:9.0f} req/s, last 10 s {last:9.0f} req/s ({drift:+.1f}%): "
      f"{'flat' if flat else 'NOT FLAT'}; RSS {rss[0]} -> {rss[-1]} KiB ({growth:+.1f}%): "
      f"{'ok' if lean else 'GREW'}" + (f"; {', '.join(notes)}" if notes else ""))
PY
)
  verdicts+=("$verdict")
}

for kind in $kinds; do
  case $kind in
    quote) soak quote 402 "$paid_body" ;;
    paid) soak paid 200 "$paid_body" ;;
    free) soak free 200 "$free_body" ;;
    *) echo "soak: unknown kind $kind (quote, paid, free)" >&2; exit 2 ;;
  esac
done

echo
echo "summary (${seconds}s per kind after a ${warmup_slices}x${slice}s warm-up, paid ${paid_warmup_slices}x${slice}s; throughput within 10%, RSS growth under 10% from the end of the warm-up):"
printf '%s\n' "${verdicts[@]}"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (figures from a busy machine are noisy)"
echo "raw output: $raw"
