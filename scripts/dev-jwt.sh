#!/usr/bin/env bash
# Gets a wallet JWT from the running data API reference server with a public
# development key, the way the OpenSea SDK does (SIWE -> session -> personal
# access token -> exchange), and writes it to target/dev-jwt (mode 0600).
# Needs node >= 20; installs its one npm dependency (viem) on first use.
#   DATA_API_KEY=... bash scripts/dev-jwt.sh
# Settings: DATA_API_URL, DATA_API_KEY, DEV_PRIVATE_KEY, SCOPES, DEV_JWT_FILE
# (see tests/interop/dev-jwt/login.mjs, which CI also runs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$root/tests/interop/dev-jwt/node_modules/viem" ]; then
  npm ci --prefix "$root/tests/interop/dev-jwt" --no-audit --no-fund --loglevel=error >&2
fi
cd "$root"
exec node tests/interop/dev-jwt/login.mjs
