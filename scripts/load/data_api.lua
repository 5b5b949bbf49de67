-- wrk script for scripts/data-api-wrk.sh: one data API GET, repeated, with
-- X-API-KEY and, for a wallet-scoped route, the bearer JWT. The credentials
-- come from the environment and a file, never from wrk's command line (which
-- anyone on the machine can read in /proc).
--
-- Environment (set by data-api-wrk.sh):
--   LOAD_API_KEY   the X-API-KEY value
--   LOAD_JWT_FILE  optional: a file holding the wallet JWT, sent as a bearer

function init(args)
  wrk.method = "GET"
  wrk.headers["X-API-KEY"] = os.getenv("LOAD_API_KEY")
  local file = os.getenv("LOAD_JWT_FILE")
  if file and file ~= "" then
    local handle = assert(io.open(file, "r"))
    local jwt = handle:read("*l")
    handle:close()
    wrk.headers["Authorization"] = "Bearer " .. jwt
  end
end

-- No response() hook (it would copy each answer into Lua, a client cost that
-- grows with the answer): wrk's own parser counts answers of 400 or more.
function done(summary, latency, requests)
  io.write(string.format("LOAD_RESULT requests=%d seconds=%.3f rps=%.0f unexpected=%d p50_ms=%.2f p99_ms=%.2f\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    summary.errors.status, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
