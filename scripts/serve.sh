#!/usr/bin/env bash
# Starts every reference server that exists, on its embedded defaults, and
# keeps them in the foreground until Ctrl-C.
#   data API: DATA_API_LISTEN (default 127.0.0.1:8080)
#   gateway:  GATEWAY_LISTEN  (default 127.0.0.1:8402)
set -euo pipefail
cd "$(dirname "$0")/.."

servers=()
for name in data_api gateway; do
  if [ -e "examples/$name" ] || [ -e "examples/$name.rs" ]; then
    servers+=("$name")
  fi
done
if [ ${#servers[@]} -eq 0 ]; then
  echo "No reference server exists yet (examples/data_api, examples/gateway)." >&2
  exit 1
fi

features=$(awk '/^\[\[example\]\]/{e=1} e&&/^required-features/{print; e=0}' Cargo.toml | grep -o '"[a-z0-9-]*"' | tr -d '"' | sort -u | paste -sd, -)
cargo build --release ${features:+--features "$features"} $(printf -- '--example %s ' "${servers[@]}")

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
for name in "${servers[@]}"; do
  "${CARGO_TARGET_DIR:-target}/release/examples/$name" &
  pids+=("$!")
done
wait
