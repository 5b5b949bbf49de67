# Sourced by the load scripts: waits up to 10 s for a gateway started in the
# background to answer GET /v1/models.
#
#   wait_gateway BASE_URL LOG_FILE   exits 1, printing the log, if it never answers
wait_gateway() {
  local _
  for _ in $(seq 1 100); do
    curl -fs -o /dev/null "$1/v1/models" && return 0
    sleep 0.1
  done
  echo "the gateway did not start:" >&2
  cat "$2" >&2
  exit 1
}
