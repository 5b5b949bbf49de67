#!/usr/bin/env bash
# Runs the MCP conformance suite (npm @modelcontextprotocol/conformance 0.1.13,
# the last release that runs on Node 20) against the data API's /mcp on
# loopback. Not part of CI: the suite mostly exercises fixture tools our server
# does not have; tests/interop/mcp-conformance/expected-failures.yml says which
# scenarios fail and why, so the run exits 0 unless that changes.
# Results: ${OUT:-target/mcp-conformance}/server-<scenario>-<time>/checks.json
set -euo pipefail
cd "$(dirname "$0")/.."

server_port=${SERVER_PORT:-18080}
proxy_port=${PROXY_PORT:-18090}
out=${OUT:-target/mcp-conformance}
target=${CARGO_TARGET_DIR:-target}
# A throwaway key for this run only.
DATA_API_KEY=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
export DATA_API_KEY

cargo build --quiet --example data_api --features tokens,siwe,mcp,tracing,jwks-url
DATA_API_LISTEN="127.0.0.1:$server_port" "$target/debug/examples/data_api" >/dev/null &
server=$!
node tests/interop/mcp-conformance/keyproxy.mjs "$proxy_port" "$server_port" &
proxy=$!
trap 'kill "$server" "$proxy" 2>/dev/null || true' EXIT

for _ in $(seq 50); do
  curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && break
  sleep 0.2
done

npx --yes @modelcontextprotocol/conformance@0.1.13 server \
  --url "http://127.0.0.1:$proxy_port/mcp" --suite all -o "$out" \
  --expected-failures tests/interop/mcp-conformance/expected-failures.yml
