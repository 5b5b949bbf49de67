# Sourced by the data API's measuring scripts (data-api-instructions.sh,
# data-api-wrk.sh): the example's release build, one server on a free loopback
# port with what both measure against, and a wallet JWT.
#
#   data_api_binary                 DATA_API_BIN, else builds the release example
#                                   (nice -n 15) and sets data_api_bin to it
#   data_api_start WORK [PREFIX…]   starts it under PREFIX (valgrind, taskset);
#                                   sets server (its pid), port, base, api_key
#   data_api_login WORK             a wallet JWT in WORK/jwt (never printed)
#
# The server: memory stores (no Redis, no external issuer), a fresh API key
# with a quota no run reaches, the access log on, into WORK/access.log.
# `wallet` is the public Hardhat/Anvil account #0: login.mjs signs in with it
# by default, and the data API seeds it with 5 favorites.
wallet=0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266

data_api_binary() {
  data_api_bin=${DATA_API_BIN:-}
  [ -z "$data_api_bin" ] || return 0
  local features
  features=$(python3 -c '
import tomllib
manifest = tomllib.load(open("Cargo.toml", "rb"))
example = next(e for e in manifest["example"] if e["name"] == "data_api")
print(",".join(example["required-features"]))
')
  nice -n 15 cargo build --quiet --release --features "$features" --example data_api
  data_api_bin=${CARGO_TARGET_DIR:-target}/release/examples/data_api
}

data_api_start() { # work [prefix…]
  local work=$1 _
  shift
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  base="http://127.0.0.1:$port"
  api_key=$(python3 -c 'import secrets; print("bench_" + secrets.token_hex(16))')
  env -u DATA_API_REDIS_URL -u DATA_API_JWKS_URL DATA_API_LISTEN="127.0.0.1:$port" DATA_API_KEY="$api_key" \
    DATA_API_KEY_PER_MINUTE=1000000000 DATA_API_ACCESS_LOG="$work/access.log" RUST_LOG=info \
    "$@" "$data_api_bin" >"$work/data_api.log" 2>&1 &
  server=$!
  # Up to 60 s: under valgrind it starts slowly.
  for _ in $(seq 600); do
    curl -fs -o /dev/null "$base/healthz" && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  echo "the data API did not start:" >&2
  cat "$work/data_api.log" >&2
  exit 1
}

data_api_login() { # work
  [ -d tests/interop/dev-jwt/node_modules/viem ] \
    || npm ci --prefix tests/interop/dev-jwt --no-audit --no-fund --loglevel=error >&2
  DATA_API_URL=$base DATA_API_KEY=$api_key DEV_JWT_FILE="$1/jwt" SCOPES="read:favorites read:wallets" \
    node tests/interop/dev-jwt/login.mjs >/dev/null
}
