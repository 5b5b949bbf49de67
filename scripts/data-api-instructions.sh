#!/usr/bin/env bash
# Instructions the data API example spends per request on a wallet-scoped
# route against a key-only one, counted by valgrind's callgrind on the release
# build: independent of the machine's load (wrk timings are not).
#
#   scripts/data-api-instructions.sh [N]             (default N = 2000)
#   DATA_API_BIN=PATH scripts/data-api-instructions.sh …  (that binary, not this tree's build)
#
# One data API under callgrind (memory stores, a fixed API key with a quota
# no run reaches), a wallet JWT obtained once the way the SDK does
# (tests/interop/dev-jwt/login.mjs: SIWE, PAT, exchange; never printed), then
# on one keep-alive connection each:
#   wallet  GET /api/v2/account/{wallet}/favorites, X-API-KEY + the same bearer JWT
#   key     GET /api/v2/accounts/{wallet}/agent-relationships, X-API-KEY only
# 200 warm-up requests of each, the counters zeroed, N wallet requests, a
# dump, N key requests, a dump. Per request is each dump's total over N;
# below, per function, the inclusive counts over N (the largest 30), and the
# wallet route's excess over the key route by function (callgrind_delta.py).
# CALLGRIND_KEEP=DIR keeps the dumps there.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-2000}
warm=200
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 1; }
# shellcheck source=load/data_api.sh
. scripts/load/data_api.sh
data_api_binary
work=$(mktemp -d)
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

out="$work/data_api.out"
data_api_start "$work" valgrind --tool=callgrind --callgrind-out-file="$out"
data_api_login "$work"

send() { # case count
  API_KEY=$api_key JWT_FILE="$work/jwt" python3 - "$1" "$2" "$port" "$wallet" <<'PY'
import http.client, os, sys
case, count, port, wallet = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
headers = {"X-API-KEY": os.environ["API_KEY"]}
if case == "wallet":
    path = f"/api/v2/account/{wallet}/favorites"
    headers["Authorization"] = "Bearer " + open(os.environ["JWT_FILE"]).read().strip()
else:
    path = f"/api/v2/accounts/{wallet}/agent-relationships"
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
size = 0
for _ in range(count):
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    size = len(response.read())
    if response.status != 200:
        sys.exit(f"{case}: status {response.status}")
connection.close()
print(size)
PY
}

wallet_bytes=$(send wallet "$warm")
key_bytes=$(send key "$warm")
callgrind_control -z "$server" >/dev/null 2>&1
send wallet "$count" >/dev/null
callgrind_control -d "$server" >/dev/null 2>&1
send key "$count" >/dev/null
callgrind_control -d "$server" >/dev/null 2>&1
kill -TERM "$server"
wait "$server" || true
server=""

total() { awk '/^summary:|^totals:/ { print $2; exit }' "$1"; }
echo "instructions per request (callgrind, data_api example, release; N=$count after $warm warm-up requests of each)"
awk -v w="$(total "$out.1")" -v k="$(total "$out.2")" -v n="$count" -v wb="$wallet_bytes" -v kb="$key_bytes" 'BEGIN {
  printf "wallet  %10.0f  (favorites, key + JWT; answer %d bytes)\n", w / n, wb
  printf "key     %10.0f  (agent-relationships, key only; answer %d bytes)\n", k / n, kb
  printf "ratio key/wallet %.2f (what wrk would show on one core if nothing else differed)\n", k / w
}'
[ -z "${CALLGRIND_KEEP:-}" ] || { mkdir -p "$CALLGRIND_KEEP"; cp "$out.1" "$CALLGRIND_KEEP/wallet.out"; cp "$out.2" "$CALLGRIND_KEEP/key.out"; }
echo
echo "wallet, per request, inclusive, by function (over N; the largest 30):"
python3 scripts/callgrind_delta.py "$out.1" - "$count" 30
echo
echo "wallet minus key, per request, inclusive, by function (the largest 30):"
python3 scripts/callgrind_delta.py "$out.1" "$out.2" "$count" 30
