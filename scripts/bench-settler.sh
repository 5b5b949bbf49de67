#!/usr/bin/env bash
# Settlement on anvil. Needs `npm ci --prefix tests/interop/chain`. Run it on an
# otherwise idle machine (or say how busy it was); it is not part of .ci/run.
#
#   bash scripts/bench-settler.sh            # the settler alone (benches/settler.rs)
#   bash scripts/bench-settler.sh --load     # N concurrent settlements, three settlers side by side
#
# Without arguments: walletgate's own settler in-process, settlement latency
# p50/p99 and paid throughput (benches/settler.rs), once with instant mining
# and once with `--block-time 1`.
#   SETTLER_BENCH_LATENCY_N=50 SETTLER_BENCH_THROUGHPUT_N=100 bash scripts/bench-settler.sh
#
# --load: one anvil with `--block-time 1` and USDC, and per delay in
# SETTLE_LOAD_DELAYS (milliseconds each way, default "0 50") a JSON-RPC proxy
# putting the node that far away (scripts/load/rpc-latency-proxy.mjs, which
# counts the calls). Against it, each target in SETTLE_LOAD_TARGETS (default
# "walletgate gateway x402-rs"), one after the other on the same chain and
# proxy, each with a fresh settler key funded with ETH:
#   walletgate  `walletgate facilitator`, SETTLE_LOAD_N (default 600) distinct
#               payments sent at once as concurrent `POST /settle`
#   gateway     the gateway example with its own settler (GATEWAY_EVM_RPC_URL),
#               SETTLE_LOAD_N concurrent paid chats (a paid model, answered
#               by the embedded echo upstream)
#   x402-rs     the x402-rs facilitator (crates.io x402-facilitator-local and
#               x402-chain-eip155 2.0.2, wired by benches/peer-facilitator,
#               built here in its own target dir), `POST /settle` as for
#               walletgate; the three contracts it refuses to start without
#               are stubbed with anvil_setCode where the chain has none
# benches/settle_load.rs signs the payments beforehand (fresh payers, minted
# USDC), sends them, and prints settlements/s, settle p50/p99 (s and blocks),
# RPC calls per settlement (by method), whether every payment landed once,
# and the settler nonce's gap at the end. SETTLE_LOAD_DEADLINE_SECS (default
# 240) bounds each run: what has not settled by then is counted unsettled.
set -euo pipefail
cd "$(dirname "$0")/.."
chain_dir=tests/interop/chain
anvil="$chain_dir/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
[ -x "$anvil" ] || { echo "run: npm ci --prefix $chain_dir" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { # port: up to 10 s
  local _
  for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

case "${1:-}" in
  "") mode=settler ;;
  --load) mode=load ;;
  *) echo "usage: $0 [--load]" >&2; exit 2 ;;
esac

if [ "$mode" = settler ]; then
  cargo bench --no-run --bench settler --features evm-settler,client-pay
  run_on() {
    local label="$1"; shift
    local port; port=$(free_port)
    "$anvil" --host 127.0.0.1 --port "$port" --chain-id 84532 --silent "$@" &
    local pid=$!
    trap 'kill $pid 2>/dev/null || true' RETURN
    wait_port "$port"
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
  exit 0
fi

# --load
delays=${SETTLE_LOAD_DELAYS:-0 50}
targets=${SETTLE_LOAD_TARGETS:-walletgate gateway x402-rs}
# One feature set for the servers and the driver: the library is built once.
features=cli,gateway,free-tier,x402,http-facilitator,cdp,rustls,axum,tracing,evm-settler,siwx,mpp,client-pay
target=${CARGO_TARGET_DIR:-target}
nice -n 10 cargo build --quiet --release --features "$features" --bin walletgate --example gateway
nice -n 10 cargo bench --quiet --no-run --bench settle_load --features "$features" 2>/dev/null
peer_target=benches/peer-facilitator/target
if [[ " $targets " == *" x402-rs "* ]]; then
  CARGO_TARGET_DIR=$peer_target nice -n 15 cargo build --quiet --release \
    --manifest-path benches/peer-facilitator/Cargo.toml
fi
walletgate_bin=$target/release/walletgate
gateway_bin=$target/release/examples/gateway
peer_bin=$peer_target/release/walletgate-peer-facilitator

work=$(mktemp -d)
pids=()
# shellcheck source=load/server.sh
. scripts/load/server.sh
cleanup() {
  stop_server
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

rpc() { # url method params-json -> the JSON answer
  curl -fsS -H 'content-type: application/json' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}" "$1"
}
fresh_key_file() { # path: a random secp256k1 key, 64 hex digits, mode 0600 (never printed)
  (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$1")
}
address_of_key_file() { # path -> the key's address (viem, from the chain's packages)
  (cd "$chain_dir" && KEY_FILE="$1" node --input-type=module -e '
    import { readFileSync } from "node:fs";
    import { privateKeyToAccount } from "viem/accounts";
    console.log(privateKeyToAccount(`0x${readFileSync(process.env.KEY_FILE, "utf8").trim()}`).address);')
}
fresh_address() {
  python3 -c 'import secrets; print("0x" + secrets.token_hex(20))'
}
wait_http() { # url log: up to 20 s for a 2xx
  local _
  for _ in $(seq 200); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "the server did not start:" >&2
  cat "$2" >&2
  exit 1
}

chain_port=$(free_port)
# SETTLE_LOAD_ANVIL_ARGS: more anvil flags (e.g. "--gas-limit 150000000", Base's block gas limit).
# shellcheck disable=SC2086
"$anvil" --host 127.0.0.1 --port "$chain_port" --chain-id 84532 --silent --block-time 1 ${SETTLE_LOAD_ANVIL_ARGS:-} &
anvil_pid=$!
pids+=("$anvil_pid")
wait_port "$chain_port"
chain="http://127.0.0.1:$chain_port"
node "$chain_dir/deploy.mjs" "$chain" >/dev/null
if [[ " $targets " == *" x402-rs "* ]]; then
  for contract in $("$peer_bin" required-contracts); do
    if [ "$(rpc "$chain" eth_getCode "[\"$contract\",\"latest\"]" | sed -n 's/.*"result":"\([^"]*\)".*/\1/p')" = 0x ]; then
      rpc "$chain" anvil_setCode "[\"$contract\",\"0x00\"]" >/dev/null
      echo "x402-rs: stubbed $contract (anvil_setCode 0x00; the exact EIP-3009 path of an EOA payer never calls it)"
    fi
  done
fi
echo "anvil --block-time 1 ${SETTLE_LOAD_ANVIL_ARGS:-}on $chain (chain 84532, USDC at Base Sepolia's address); load average $(cut -d' ' -f1-3 /proc/loadavg)"

run_target() { # name proxy-url proxy-stats-url delay
  local name=$1 proxy=$2 delay=$3 port base key settler pay_to log
  port=$(free_port)
  base="http://127.0.0.1:$port"
  key=$work/$name-$delay.key
  log=$work/$name-$delay.log
  fresh_key_file "$key"
  settler=$(address_of_key_file "$key")
  rpc "$chain" anvil_setBalance "[\"$settler\",\"0x3635c9adc5dea00000\"]" >/dev/null # 1000 ETH
  pay_to=$(fresh_address)
  case $name in
    walletgate)
      WALLETGATE_FACILITATOR_RPC_URL=$proxy RUST_LOG=warn "$walletgate_bin" facilitator --key-file "$key" \
        --network eip155:84532 --asset 0x036CbD53842c5426634e7929541eC2318f3dCF7e --pay-to "$pay_to" \
        --listen "127.0.0.1:$port" --max-connections 4096 >"$log" 2>&1 &
      server=$!
      wait_http "$base/supported" "$log"
      ;;
    x402-rs)
      PEER_LISTEN="127.0.0.1:$port" PEER_RPC_URL=$proxy PEER_CHAIN_ID=84532 PEER_SETTLER_KEY="$(cat "$key")" \
        "$peer_bin" >"$log" 2>&1 &
      server=$!
      wait_http "$base/supported" "$log"
      ;;
    gateway)
      env -u GATEWAY_REDIS_URL -u GATEWAY_FACILITATOR_URL -u GATEWAY_FAULTS \
        GATEWAY_EVM_RPC_URL=$proxy GATEWAY_SETTLER_KEY_FILE=$key GATEWAY_PAY_TO=$pay_to \
        GATEWAY_UPTO=off GATEWAY_MPP=off GATEWAY_SIWX=off GATEWAY_PAYMENT_ID=off GATEWAY_BAZAAR=off \
        GATEWAY_LISTEN="127.0.0.1:$port" GATEWAY_FREE_PER_MINUTE=4194303 GATEWAY_FREE_PER_HOUR=4194303 \
        RUST_LOG=warn "$gateway_bin" >"$log" 2>&1 &
      server=$!
      wait_http "$base/v1/models" "$log"
      ;;
  esac
  local driver=facilitator
  [ "$name" = gateway ] && driver=gateway
  SETTLE_LOAD_TARGET=$driver SETTLE_LOAD_URL=$base SETTLE_LOAD_CHAIN_RPC=$chain SETTLE_LOAD_PROXY=$proxy \
    SETTLE_LOAD_SETTLER=$settler SETTLE_LOAD_PAY_TO=$pay_to SETTLE_LOAD_LABEL="$name ${delay}ms" \
    SETTLE_LOAD_WATCH="node:$anvil_pid proxy:$proxy_pid server:$server" \
    nice -n 5 cargo bench --quiet --bench settle_load --features "$features" 2>"$work/driver.err" \
    || { cat "$work/driver.err" >&2; echo "server log:" >&2; tail -n 20 "$log" >&2; exit 1; }
  stop_server
}

for delay in $delays; do
  proxy_port=$(free_port)
  node scripts/load/rpc-latency-proxy.mjs "$proxy_port" "$chain" "$delay" 2>/dev/null &
  proxy_pid=$!
  pids+=("$proxy_pid")
  wait_port "$proxy_port"
  echo
  echo "== ${delay} ms added each way to every RPC call (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for name in $targets; do
    run_target "$name" "http://127.0.0.1:$proxy_port" "$delay"
  done
  kill "$proxy_pid" 2>/dev/null || true
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
