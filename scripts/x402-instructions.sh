#!/usr/bin/env bash
# Instructions per paid request against the floor (the EIP-712 digest and one
# libsecp256k1 recovery), counted by valgrind's callgrind: independent of the
# machine's load, so it can be run while other work shares the cores (the
# criterion timings of benches/x402.rs cannot).
#
#   scripts/x402-instructions.sh [N]      (default N = 2000)
#
# Runs the x402 bench binary three times under callgrind with
# X402_INSTRUCTIONS=none:N, floor:N and paid:N (the same set-up each time: a
# warm-up and N signed requests), and prints per request
# (total - set-up) / N for the floor and for the paid request, their ratio,
# and, per function, the paid run's inclusive count less the set-up run's.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-2000}
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 1; }

bench=$(cargo bench --bench x402 --features x402 --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "x402" and m.get("executable"):
        print(m["executable"])')
[ -x "$bench" ] || { echo "the x402 bench did not build" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

total() { # mode -> total instructions (Ir) of the run
  X402_INSTRUCTIONS="$1:$count" valgrind --tool=callgrind --callgrind-out-file="$work/$1.out" "$bench" \
    >/dev/null 2>"$work/$1.log"
  awk '/^summary:|^totals:/ { print $2; exit }' "$work/$1.out"
}
none=$(total none)
floor=$(total floor)
paid=$(total paid)
echo "instructions per request (callgrind, N=$count; set-up subtracted)"
awk -v n="$count" -v none="$none" -v floor="$floor" -v paid="$paid" 'BEGIN {
  f = (floor - none) / n; p = (paid - none) / n
  printf "  digest + recovery (floor): %10.0f\n  paid request:              %10.0f\n  ratio:                     %10.3f\n", f, p, p / f
}'
echo "per paid request, inclusive, by function (the paid run minus the set-up run, over N; the largest 40):"
python3 scripts/callgrind_delta.py "$work/paid.out" "$work/none.out" "$count" 40
