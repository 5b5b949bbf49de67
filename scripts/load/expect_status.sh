# Sourced by the load scripts: wrk's own count only tells answers below 400
# from 400 and over (scripts/load/gateway.lua), so each run checks the exact
# status of one request first.
#
#   expect_status WHAT METHOD URL EXPECTED [JSON_BODY]   exits 1 on another status
expect_status() {
  local status
  status=$(curl -s -o /dev/null -w '%{http_code}' -X "$2" ${5:+-H 'content-type: application/json' -d "$5"} "$3")
  [ "$status" = "$4" ] || { echo "$1: $2 $3 answered HTTP $status, not $4" >&2; exit 1; }
}
