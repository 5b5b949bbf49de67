-- walletgate's API-key quota (`KeyQuota`): a GCRA bucket, the arithmetic of
-- governor's (the in-memory default), run atomically on the Redis server.
--
-- KEYS[1]  the bucket: its theoretical arrival time (TAT), Unix microseconds
-- ARGV     emission interval (us), tolerance = (requests - 1) * interval (us),
--          [a fixed "now" in Unix us: only the crate's own tests pass it]
-- Returns  {1, requests still admitted now} when admitted (governor's
--          remaining burst capacity), {0, wait (us) until one is} when not
--
-- Time is the server's (`TIME`), so the replicas' clocks never decide. Every
-- number is an integer below 2^53 (Unix microseconds are about 2^51).

if redis.replicate_commands then
  redis.replicate_commands()
end

local now
if ARGV[3] then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])

local tat = tonumber(redis.call('GET', KEYS[1]) or '') or now
local earliest = tat - tolerance
if now < earliest then
  return { 0, earliest - now }
end
local next_tat = math.max(tat, now) + interval
-- Once now reaches the TAT the bucket is full again: the key can go.
local ttl_millis = math.floor((next_tat - now + 999) / 1000)
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', ttl_millis)
return { 1, math.floor((now + tolerance + interval - next_tat) / interval) }
