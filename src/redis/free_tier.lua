-- The free-tier rule of walletgate's `ClientWindows::decide`, run atomically
-- on the Redis server (src/free_tier/window.rs documents the rule and its
-- proof; this is a line-by-line port, kept in step by the contract tests).
--
-- KEYS[1]  the client's state: the 88 bytes of `ClientWindows::to_bytes`
--          (u64 last admitted time, 7 minute words, 13 hour words, little-endian)
-- ARGV     per_minute, per_hour,
--          minute window, slot, unit, offset bits,
--          hour window, slot, unit, offset bits,
--          [a fixed "now" in Unix ms: only the crate's own tests pass it]
-- Returns  {admitted (1/0), limit, remaining, reset (Unix ms), retry after (ms)}
--
-- Time is the server's (`TIME`), so the replicas' clocks never decide.
-- Numbers are Lua doubles: every value here (Unix ms, 32-bit words) is an
-- integer below 2^53, and the divisions are floored explicitly.

if redis.replicate_commands then
  redis.replicate_commands()
end

local function floor_div(a, b)
  return math.floor(a / b)
end

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

local now
if ARGV[11] then
  now = tonumber(ARGV[11])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor_div(tonumber(t[2]), 1000)
end
local now_in = now

local per_minute = tonumber(ARGV[1])
local per_hour = tonumber(ARGV[2])
local geometries = {
  { window = tonumber(ARGV[3]), slot = tonumber(ARGV[4]), unit = tonumber(ARGV[5]),
    bits = 2 ^ tonumber(ARGV[6]), n = 7, first = 1 },
  { window = tonumber(ARGV[7]), slot = tonumber(ARGV[8]), unit = tonumber(ARGV[9]),
    bits = 2 ^ tonumber(ARGV[10]), n = 13, first = 8 },
}

-- The state: anchor (last admitted time) and 20 words.
local anchor = 0
local words = {}
for i = 1, 20 do
  words[i] = 0
end
local stored = redis.call('GET', KEYS[1])
if stored and #stored == 88 then
  local lo, hi = struct.unpack('<I4I4', stored)
  anchor = hi * 4294967296 + lo
  for i = 1, 20 do
    words[i] = struct.unpack('<I4', stored, 9 + (i - 1) * 4)
  end
end
if now < anchor then
  -- A clock stepping back stands still at the last admitted time.
  now = anchor
end

-- Ring::slots + Ring::assess: {used, full_at, admits_at}.
local function assess(g, limit)
  local newest = floor_div(anchor, g.slot)
  local counted = {}
  for i = 0, g.n - 1 do
    local age = (newest % g.n + g.n - i) % g.n
    local start = (newest - math.min(age, newest)) * g.slot
    local word = words[g.first + i]
    local offset = word % g.bits
    local last = start + offset * g.unit
    local count = floor_div(word, g.bits)
    if last + g.window < now then
      count = 0
    end
    if count > 0 then
      counted[#counted + 1] = { last, count }
    end
  end
  table.sort(counted, function(a, b)
    return a[1] < b[1]
  end)
  local used = 0
  local full_at = now
  for _, slot in ipairs(counted) do
    used = used + slot[2]
    full_at = math.max(full_at, slot[1] + g.window + 1)
  end
  if #counted == 0 then
    full_at = now
  end
  local admits_at = now
  local left = used
  for _, slot in ipairs(counted) do
    if left < limit then
      break
    end
    left = left - slot[2]
    admits_at = slot[1] + g.window + 1
  end
  return { used = used, full_at = full_at, admits_at = admits_at, limit = limit }
end

-- Ring::record.
local function record(g)
  local old = floor_div(anchor, g.slot)
  local new = floor_div(now, g.slot)
  local last_period = math.min(new, old + g.n)
  for period = old + 1, last_period do
    words[g.first + period % g.n] = 0
  end
  local i = g.first + new % g.n
  local offset = ceil_div(now - new * g.slot, g.unit) % g.bits
  local count = floor_div(words[i], g.bits) + 1
  words[i] = count * g.bits + offset
end

-- Geometry::stored.
local function stored_at(g, at)
  local start = at - at % g.slot
  return start + ceil_div(at - start, g.unit) * g.unit
end

local minute = assess(geometries[1], per_minute)
local hour = assess(geometries[2], per_hour)

if minute.used < per_minute and hour.used < per_hour then
  record(geometries[1])
  record(geometries[2])
  anchor = now
  local parts = { struct.pack('<I4I4', anchor % 4294967296, floor_div(anchor, 4294967296)) }
  for i = 1, 20 do
    parts[i + 1] = struct.pack('<I4', words[i])
  end
  -- Nothing is counted once the newest request left both windows.
  local ttl = 1
  for _, g in ipairs(geometries) do
    ttl = math.max(ttl, stored_at(g, now) + g.window + 1 - now)
  end
  redis.call('SET', KEYS[1], table.concat(parts), 'PX', ttl)
  local minute_left = per_minute - minute.used - 1
  local hour_left = per_hour - hour.used - 1
  local limit, remaining, g = per_hour, hour_left, geometries[2]
  if minute_left < hour_left then
    limit, remaining, g = per_minute, minute_left, geometries[1]
  end
  return { 1, limit, remaining, stored_at(g, now) + g.window + 1, 0 }
end

-- Refused: wait for the slowest refusing quota (the hour on a tie).
local refusing = nil
for _, quota in ipairs({ minute, hour }) do
  if quota.used >= quota.limit and (refusing == nil or quota.admits_at >= refusing.admits_at) then
    refusing = quota
  end
end
if refusing == nil then
  refusing = minute
end
return { 0, refusing.limit, 0, refusing.full_at, math.max(0, refusing.admits_at - now_in) }
