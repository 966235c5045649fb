#!lua flags=allow-key-locking
--[[
  slidegate: one exact sliding-window-log decision for every rule a request matches.

  Atomic by construction: Redis runs the whole script before any other command, so
  "evict, count, record" cannot interleave across the fleet.

  KEYS (all of one identity share a {hash tag}, so this stays cluster-safe):
    KEYS[1]     the operator's block: present (with a TTL) while the identity is blocked
    then two per rule i:
    KEYS[2i]    the log: a sorted set, member = request id, score = arrival time in µs
    KEYS[2i+1]  the extra weight: sum of (cost - 1) over the log's weighted members;
                absent while every member costs 1, so plain traffic never pays for weights
  ARGV:
    [1]  now in µs, or "" to take Redis TIME (one clock for the whole fleet)
    [2]  request id, unique per request
    then four per rule i, from j = 4i - 1: [j] limit, [j+1] window in ms, [j+2] cost of
    this request, [j+3] "1" for a shadow rule (decided and reported, never enforced)
  Returns
    { 2, block ms left }  while an operator block holds (nothing is read or recorded)
    { admitted (1|0), 0, then per rule: remaining, reset ms, retry ms }
      reset ms: until the oldest entry leaves the window (one unit of quota returns)
      retry ms: until this request would fit (0 when it fits now, -1 when cost > limit)
]]

local block = redis.call('PTTL', KEYS[1])
if block ~= -2 then return { 2, block } end

local function clock()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A weighted member is "<cost>.<id>"; request ids never contain a dot, so a plain
-- member (cost 1) stores nothing but its id: O(1) memory per request, whatever its cost.
local function member_cost(member)
  local cost = string.match(member, '^(%d+)%.')
  return cost and tonumber(cost) or 1
end

local now = clock()
local request_id = ARGV[2]
local rules = {}
-- whether every enforced rule fits: shadow rules never decide
local fits = true

-- Pass 1: evict what has left each window and measure what is still in it.
for i = 1, (#KEYS - 1) / 2 do
  local a = 4 * i - 1
  local r = {
    log = KEYS[2 * i], weight = KEYS[2 * i + 1],
    limit = tonumber(ARGV[a]), window_ms = tonumber(ARGV[a + 1]),
    cost = tonumber(ARGV[a + 2]), shadow = ARGV[a + 3] == '1',
  }
  r.window = r.window_ms * 1000
  local cutoff = now - r.window
  -- GET answers false for a missing key
  r.extra = tonumber(redis.call('GET', r.weight) or 0)
  if r.extra > 0 then
    local leaving = 0
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', r.log, '-inf', cutoff)) do
      leaving = leaving + member_cost(m) - 1
    end
    if leaving > 0 then
      r.extra = r.extra - leaving
      if r.extra > 0 then redis.call('DECRBY', r.weight, leaving) else redis.call('DEL', r.weight) end
    end
  end
  redis.call('ZREMRANGEBYSCORE', r.log, '-inf', cutoff)
  r.used = redis.call('ZCARD', r.log) + r.extra
  r.fit = r.used + r.cost <= r.limit
  if not r.fit and not r.shadow then fits = false end
  rules[i] = r
end

-- Pass 2: all or nothing over the enforced rules. A denied request records nothing, so a
-- throttled caller cannot push its own window forward. A shadow rule records what it
-- would have admitted, so its would-deny count stays what enforcing it would give.
if fits then
  for _, r in ipairs(rules) do
    if r.fit then
      local member = r.cost > 1 and (r.cost .. '.' .. request_id) or request_id
      -- Ids are random; should one ever repeat inside a window, keep both requests.
      while redis.call('ZADD', r.log, 'NX', now, member) == 0 do member = member .. '~' end
      redis.call('PEXPIRE', r.log, r.window_ms)
      if r.cost > 1 then redis.call('INCRBY', r.weight, r.cost - 1) end
      if r.cost > 1 or r.extra > 0 then redis.call('PEXPIRE', r.weight, r.window_ms) end
      r.used = r.used + r.cost
    end
  end
end

-- Time until enough of the oldest weight leaves the window for `r.cost` to fit.
local function retry_after(r)
  if r.cost > r.limit then return -1 end
  local need = r.used + r.cost - r.limit
  if r.extra == 0 then
    -- every member weighs 1: the need-th oldest entry is the one to wait for
    local e = redis.call('ZRANGE', r.log, need - 1, need - 1, 'WITHSCORES')
    return tonumber(e[2]) + r.window - now
  end
  local freed, start = 0, 0
  while true do
    local batch = redis.call('ZRANGE', r.log, start, start + 127, 'WITHSCORES')
    for j = 1, #batch, 2 do
      freed = freed + member_cost(batch[j])
      if freed >= need then return tonumber(batch[j + 1]) + r.window - now end
    end
    start = start + 128
  end
end

local out = { fits and 1 or 0, 0 }
for _, r in ipairs(rules) do
  local oldest = redis.call('ZRANGE', r.log, 0, 0, 'WITHSCORES')
  local reset = oldest[2] and (tonumber(oldest[2]) + r.window - now) or 0
  local retry = 0
  if not r.fit then retry = retry_after(r) end
  if retry > 0 then retry = math.ceil(retry / 1000) end
  out[#out + 1] = math.max(r.limit - r.used, 0)
  out[#out + 1] = math.ceil(reset / 1000)
  out[#out + 1] = retry
end
return out
