#!/usr/bin/env bash
# Requests per second of the data API example on loopback, with wrk: a
# wallet-scoped route against a key-only one, on one server, the two taking
# turns (issue 44: the wallet-scoped one should run at >= 0.8 of the other).
#
#   scripts/data-api-wrk.sh                      (builds the release example)
#   DATA_API_BIN=PATH scripts/data-api-wrk.sh    (that binary instead)
#
#   wallet  GET /api/v2/account/{wallet}/favorites, X-API-KEY + the same
#           bearer JWT on every request (the dev seed's 5 favorites)
#   key     GET /api/v2/accounts/{wallet}/agent-relationships, X-API-KEY only
#
# The server runs alone on core 1 (taskset -c 1) and wrk with one thread on
# core 0 (taskset -c 0 wrk -t1), so a route's throughput is the inverse of
# the server's CPU per request, whatever wrk costs. Memory stores, a fixed
# API key with a quota no run reaches, the access log on (into a file, as in
# scripts/data-api-instructions.sh). The JWT is obtained once the way the SDK
# does (tests/interop/dev-jwt/login.mjs: SIWE, PAT, exchange) and is never
# printed nor put on a command line.
#
# Per round, both routes in turn (the order alternates between rounds), each
# for DATA_API_WRK_DURATION; then per round req/s of each, the ratio
# wallet/key, and the server's CPU per request (utime + stime of its pid in
# /proc over the run, divided by the requests), and the medians over rounds.
# The output is also written to benches/results/<UTC time>-data-api-wrk.txt.
# Wall-clock figures mean something on an otherwise idle machine only: the
# load average is printed before and after.
#
#   DATA_API_WRK_ROUNDS       rounds (default 3, 1..10)
#   DATA_API_WRK_DURATION     seconds of one run (default 5, 1..60)
#   DATA_API_WRK_CONNECTIONS  wrk connections (default 32, 1..1000)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${DATA_API_WRK_ROUNDS:-3}
duration=${DATA_API_WRK_DURATION:-5}
connections=${DATA_API_WRK_CONNECTIONS:-32}
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] && [ "$rounds" -le 10 ] \
  || { echo "DATA_API_WRK_ROUNDS must be 1..10" >&2; exit 1; }
[[ $duration =~ ^[0-9]+$ ]] && [ "$duration" -ge 1 ] && [ "$duration" -le 60 ] \
  || { echo "DATA_API_WRK_DURATION must be 1..60 (seconds)" >&2; exit 1; }
[[ $connections =~ ^[0-9]+$ ]] && [ "$connections" -ge 1 ] && [ "$connections" -le 1000 ] \
  || { echo "DATA_API_WRK_CONNECTIONS must be 1..1000" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
command -v taskset >/dev/null || { echo "taskset is missing (util-linux)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs two CPUs (0 and 1)" >&2; exit 1; }
mkdir -p benches/results
raw=benches/results/$(date -u +%Y-%m-%dT%H%M%SZ)-data-api-wrk.txt
exec > >(tee "$raw") 2>&1

# shellcheck source=load/data_api.sh
. scripts/load/data_api.sh
# shellcheck source=load/server.sh
. scripts/load/server.sh
if [ -n "${DATA_API_BIN:-}" ]; then
  echo "measuring DATA_API_BIN=$DATA_API_BIN"
else
  echo "building (release, nice -n 15): the data_api example at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)')"
fi
data_api_binary
work=$(mktemp -d)
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
data_api_start "$work" taskset -c 1
data_api_login "$work"

# Headers for curl from files (-H @file), so no credential is on a command line.
printf 'X-API-KEY: %s\n' "$api_key" >"$work/key.headers"
{ cat "$work/key.headers"; printf 'Authorization: Bearer %s\n' "$(cat "$work/jwt")"; } >"$work/wallet.headers"
chmod 600 "$work/key.headers" "$work/wallet.headers"
path_of() { # route
  if [ "$1" = wallet ]; then echo "/api/v2/account/$wallet/favorites"; else echo "/api/v2/accounts/$wallet/agent-relationships"; fi
}
for route in wallet key; do
  probe=$(curl -s -o "$work/$route.body" -w '%{http_code}' -H @"$work/$route.headers" "$base$(path_of "$route")")
  [ "$probe" = 200 ] || { echo "$route: $(path_of "$route") answered HTTP $probe, not 200" >&2; exit 1; }
done
echo "server on CPU 1 (taskset -c 1), wrk -t1 -c$connections on CPU 0; ${duration}s per run, $rounds rounds"
echo "wallet = GET $(path_of wallet), X-API-KEY + bearer JWT (answer $(wc -c <"$work/wallet.body") bytes)"
echo "key    = GET $(path_of key), X-API-KEY only (answer $(wc -c <"$work/key.body") bytes)"
echo

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
ticks_per_second=$(getconf CLK_TCK)
results=$work/results.tsv # round route rps cpu_us_per_request
run() { # round route
  local round=$1 route=$2 jwt_file="" line before after field requests=0 rps=0 unexpected=0 cpu
  [ "$route" = key ] || jwt_file="$work/jwt"
  before=$(cpu_ticks)
  line=$(LOAD_API_KEY=$api_key LOAD_JWT_FILE=$jwt_file timeout $((duration + 30)) \
    taskset -c 0 wrk -t1 -c"$connections" -d"${duration}s" -s scripts/load/data_api.lua "$base$(path_of "$route")" \
    | grep LOAD_RESULT) || { echo "wrk gave no result for $route" >&2; exit 1; }
  after=$(cpu_ticks)
  for field in ${line#LOAD_RESULT }; do
    case $field in
      requests=*) requests=${field#requests=} ;;
      rps=*) rps=${field#rps=} ;;
      unexpected=*) unexpected=${field#unexpected=} ;;
    esac
  done
  [ "$unexpected" = 0 ] || { echo "$route: $unexpected answers of 400 or more" >&2; exit 1; }
  cpu=$(awk -v t="$((after - before))" -v hz="$ticks_per_second" -v n="$requests" \
    'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }')
  printf 'round %s  %-6s %s cpu_us_per_request=%s\n' "$round" "$route" "${line#LOAD_RESULT }" "$cpu"
  printf '%s\t%s\t%s\t%s\n' "$round" "$route" "$rps" "$cpu" >>"$results"
}

for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then order="wallet key"; else order="key wallet"; fi
  for route in $order; do
    run "$round" "$route"
  done
done
stop_server

echo
awk -F'\t' '
  function median(list, count,    sorted, i, j, t) {
    for (i = 1; i <= count; i++) sorted[i] = list[i]
    for (i = 1; i <= count; i++) for (j = i + 1; j <= count; j++) if (sorted[j] < sorted[i]) { t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t }
    return count % 2 ? sorted[(count + 1) / 2] : (sorted[count / 2] + sorted[count / 2 + 1]) / 2
  }
  { rps[$1, $2] = $3; cpu[$1, $2] = $4; if ($1 > rounds) rounds = $1 }
  END {
    printf "round   wallet req/s   key req/s   wallet/key   cpu us/request wallet   key\n"
    for (r = 1; r <= rounds; r++) {
      ratio[r] = rps[r, "wallet"] / rps[r, "key"]; cw[r] = cpu[r, "wallet"]; ck[r] = cpu[r, "key"]
      w[r] = rps[r, "wallet"]; k[r] = rps[r, "key"]
      printf "%5d   %12d   %9d   %10.2f   %21.1f   %5.1f\n", r, w[r], k[r], ratio[r], cw[r], ck[r]
    }
    printf "median  %12d   %9d   %10.2f   %21.1f   %5.1f\n", median(w, rounds), median(k, rounds), median(ratio, rounds), median(cw, rounds), median(ck, rounds)
  }' "$results"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(written to $raw)"
