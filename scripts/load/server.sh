# Sourced by the bench scripts: the one server of the moment, started in the
# background with `server=$!`, and its stop (the process ended and reaped).
server=""
stop_server() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
  fi
}
