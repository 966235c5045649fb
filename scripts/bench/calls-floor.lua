--[[
  A floor for the script-cost benchmark, not a limiter: the Redis calls slidegate's script makes
  for an admitted request under one rule, in the same order and on the same keys, with none of
  its logic — no checks, no arithmetic beyond what the calls need, a fixed reply of the same
  shape. What slidegate's 1-rule row costs above this row is its Lua; what this row costs above
  the seed script is the calls slidegate makes that the seed does not (the fleet clock, the
  operator's block, the newest and oldest entries). Same KEYS and ARGV as slidegate's script.
]]
local call = redis.call
-- "" (Redis TIME) reads as no number: the same TIME call, without the script's checks
local now = tonumber(ARGV[1])
if not now then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end
call('GET', KEYS[1])
local key, window = KEYS[3], ARGV[6] * 1000
call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
local e = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local total, newest = 0, false
if e[1] then total, newest = e[1] + 1, e[2] + 0 end
call('ZRANGE', key, '0', '0', 'WITHSCORES')
local at = newest and newest >= now and newest + 1 or now
call('ZADD', key, string.format('%d', at), string.format('%d', total))
local eighth = window / 8
if not newest or at - at % eighth ~= newest - newest % eighth then call('PEXPIRE', key, math.ceil((window + eighth) / 1000)) end
return { 1, 0, 0, 0, 0, 0 }
