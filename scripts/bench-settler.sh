#!/usr/bin/env bash
# walletgate's own settler on anvil: settlement latency p50/p99 and paid
# throughput (benches/settler.rs), once with instant mining and once with
# `--block-time 1`. Needs `npm ci --prefix tests/interop/chain`. Run it on an
# otherwise idle machine; it is not part of .ci/run.
#
#   bash scripts/bench-settler.sh
#   SETTLER_BENCH_LATENCY_N=50 SETTLER_BENCH_THROUGHPUT_N=100 bash scripts/bench-settler.sh
set -euo pipefail
cd "$(dirname "$0")/.."
chain_dir=tests/interop/chain
anvil="$chain_dir/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
[ -x "$anvil" ] || { echo "run: npm ci --prefix $chain_dir" >&2; exit 1; }
cargo bench --no-run --bench settler --features evm-settler,client-pay
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run_on() {
  local label="$1"; shift
  local port; port=$(free_port)
  "$anvil" --host 127.0.0.1 --port "$port" --chain-id 84532 --silent "$@" &
  local pid=$!
  trap 'kill $pid 2>/dev/null || true' RETURN
  for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  node "$chain_dir/deploy.mjs" "http://127.0.0.1:$port" >/dev/null
  echo "== $label"
  WALLETGATE_BENCH_EVM_RPC_URL="http://127.0.0.1:$port" \
    cargo bench --bench settler --features evm-settler,client-pay
}
run_on "anvil, instant mining"
# One block a second: a settlement waits for the next block (~0.5 s on average).
SETTLER_BENCH_LATENCY_N="${SETTLER_BENCH_LATENCY_N:-20}" \
SETTLER_BENCH_THROUGHPUT_N="${SETTLER_BENCH_THROUGHPUT_N:-100}" \
  run_on "anvil --block-time 1" --block-time 1
