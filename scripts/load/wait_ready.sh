# Sourced by the load scripts: waits up to 10 s for a server started in the
# background (the gateway, or the bench's peer) to answer GET /v1/models.
#
#   wait_ready BASE_URL LOG_FILE   exits 1, printing the log, if it never answers
wait_ready() {
  local _
  for _ in $(seq 1 100); do
    curl -fs -o /dev/null "$1/v1/models" && return 0
    sleep 0.1
  done
  echo "the server did not start:" >&2
  cat "$2" >&2
  exit 1
}
