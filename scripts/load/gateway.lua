-- wrk script for scripts/load.sh: one kind of gateway request, repeated.
--
-- Environment (set by load.sh):
--   LOAD_METHOD    GET or POST
--   LOAD_BODY      the JSON body of a POST
--   LOAD_EXPECT    the status every answer must have: below 400, answers of
--                  400 or more are counted as unexpected; 400 or more, the
--                  answers below 400 are
--   LOAD_PAYMENTS  optional: a file of pre-signed PAYMENT-SIGNATURE values,
--                  one per line; each is sent once, split between threads
--   LOAD_THREADS   wrk's thread count (to split the payments)

local threads = {}
local next_index = 0

function setup(thread)
  thread:set("index", next_index)
  next_index = next_index + 1
  table.insert(threads, thread)
end

function init(args)
  wrk.method = os.getenv("LOAD_METHOD") or "GET"
  wrk.body = os.getenv("LOAD_BODY")
  wrk.headers["Content-Type"] = "application/json"
  exhausted = 0
  payments = nil
  local file = os.getenv("LOAD_PAYMENTS")
  if file and file ~= "" then
    local count = tonumber(os.getenv("LOAD_THREADS") or "1")
    payments = {}
    local line_number = 0
    for line in io.lines(file) do
      if line_number % count == index then
        payments[#payments + 1] = line
      end
      line_number = line_number + 1
    end
    next_payment = 1
  end
end

function request()
  if payments == nil then
    return wrk.request()
  end
  local payment = payments[next_payment]
  if payment == nil then
    -- Out of fresh payments: stop rather than send replays.
    exhausted = 1
    wrk.thread:stop()
    payment = payments[#payments]
  end
  next_payment = next_payment + 1
  local headers = { ["Content-Type"] = "application/json", ["PAYMENT-SIGNATURE"] = payment }
  return wrk.format(nil, nil, headers, nil)
end

-- No response() hook: with one, wrk copies every answer's headers into a Lua
-- table and its body into a Lua string, a client cost that grows with the
-- answer (a full quote is three long headers and a JSON body) and, on a shared
-- machine, comes out of the server's throughput. wrk's own parser counts
-- answers with a status of 400 or more instead (summary.errors.status): a
-- cell expecting 2xx counts those as unexpected, a cell expecting an error
-- status counts the answers below 400. (The scripts check the exact status
-- of one request before a run: scripts/load/expect_status.sh.)

function done(summary, latency, requests)
  local ran_out = 0
  for _, thread in ipairs(threads) do
    ran_out = ran_out + (thread:get("exhausted") or 0)
  end
  local bad = summary.errors.status
  if tonumber(os.getenv("LOAD_EXPECT") or "200") >= 400 then
    bad = summary.requests - summary.errors.status
  end
  io.write(string.format("LOAD_RESULT requests=%d seconds=%.3f rps=%.0f unexpected=%d p50_ms=%.2f p99_ms=%.2f exhausted=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6), bad,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, ran_out))
end
