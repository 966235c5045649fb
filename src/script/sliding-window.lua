#!lua flags=allow-key-locking
--[[
  slidegate: one exact sliding-window-log decision for every rule a request matches.

  Atomic by construction: Redis runs the whole script before any other command, so
  "count, decide, record" cannot interleave across the fleet.

  Total by construction: whatever subset of its keys was deleted, evicted or expired between
  calls, the keys that are left are each a consistent log, so every reply is well formed. The
  work per call is at most 2 calls for the block, then per rule 3 reads and 4 writes, plus
  (only for a rule that does not fit and waits for more than its oldest entry) 2 +
  ceil(log2(units to wait for)) <= 22 reads in a loop of at most 64 steps. Every call is
  O(log n) but ZREMRANGEBYSCORE, which removes entries earlier calls recorded, each once.

  KEYS (all of one identity share a {hash tag}, so this stays cluster-safe):
    KEYS[1]      the operator's block: a string holding when it ends (µs, on this script's
                 clock); its TTL only collects it
    KEYS[2]      the API key's registry entry: a hash with `tier`, `disabled` ("1"), and
                 per-rule overrides `limit:<rule>`, `window:<rule>` (ms); read in this same
                 call, so a change to it holds from the next decision anywhere
    KEYS[2 + i]  the log of rule i: a sorted set with one entry per recorded request,
                 score = arrival time in µs, member = the log's running total of cost before
                 the entry, as "<total>", or "<total>:<cost>" when the entry weighs more than 1
  ARGV:
    [1]  now in µs, or "" to take Redis TIME (one clock for the whole fleet)
    [2]  the tier whose rules follow
    [3]  the tier when the registry holds no entry for the key: its configured tier; "" for
         a key nobody knows (answered { 3 }); "-" for a caller that is not a key (the
         registry is not read)
    then five per rule i, from j = 5i - 1: [j] name, [j+1] limit, [j+2] window in ms, [j+3]
    cost of this request (a whole number >= 1), [j+4] "1" for a shadow rule (decided,
    reported, recorded when it fits, never enforced)
  Returns (nothing is read or recorded for 2 to 5)
    { 2, ms }    while an operator block holds (ms >= 1, or -1 for a block without end)
    { 3 }        a key the registry does not know, and no configured tier
    { 4 }        a key the registry disables
    { 5, tier }  the registry puts the key in another tier: ask again with its rules
    { admitted (1|0), then per rule: remaining, reset ms, retry ms, limit, window ms }
      reset ms: until the oldest entry in the window leaves it (one more unit comes back)
      retry ms: until this request would fit (0 when it fits now, -1 when cost > limit)
      limit, window ms: the rule's, or the key's overrides of them

  Why running totals instead of counting members: the weight in a window is
  (total after the newest entry) - (total before the oldest entry still in the window), two
  O(log n) reads whatever the costs, with no second key that could disagree with the log.
  Members stay unique without a request id, because the total only grows; an integer member
  is stored compactly. Scores strictly increase (a new entry is never placed before the
  newest one, even when clocks disagree), so rank order is arrival order and the totals grow
  with rank: that lets the retry time of a weighted request be found by binary search.

  A log's clock never runs back: every call first drops what has left the window by its own
  clock, and a clock behind the log's newest entry reads the window as ending at that entry,
  so a clock that was stepped back never brings entries back.

  The log's TTL is refreshed when a write starts a new eighth of a window (or is placed ahead
  of the clock, or the key has its own window) rather than on every write: each refresh sets
  it to a window and an eighth past the new entry, so it still covers a window past any entry
  written later in the same eighth. (A rule whose configured window grows catches up within
  an eighth of the new window.)
]]

local call, format = redis.call, string.format

local now = ARGV[1]
if now == '' then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
  if not now or now % 1 ~= 0 then return redis.error_reply('slidegate: now must be whole microseconds') end
end

local block = call('GET', KEYS[1])
if block then
  local ends = tonumber(block)
  if ends then
    if ends > now then return { 2, math.ceil((ends - now) / 1000) } end
  else
    -- not written by slidegate's admin API: the key's own TTL says how long it holds
    local ttl = call('PTTL', KEYS[1])
    if ttl == -1 then return { 2, -1 } end
    if ttl >= 0 then return { 2, math.max(ttl, 1) } end
  end
end

-- The registry: one read for the whole entry. An override that is not a whole number >= 1
-- (written by hand, say) is no override.
local overrides = false
local fallback = ARGV[3]
if fallback ~= '-' then
  local entry = call('HGETALL', KEYS[2])
  local tier = fallback
  for j = 1, #entry, 2 do
    local field, value = entry[j], entry[j + 1]
    if field == 'tier' then
      tier = value
    elseif field == 'disabled' then
      if value == '1' then return { 4 } end
    elseif string.find(value, '^%d+$') and tonumber(value) >= 1 then
      overrides = overrides or {}
      overrides[field] = tonumber(value)
    end
  end
  if tier == '' then return { 3 } end
  if tier ~= ARGV[2] then return { 5, tier } end
end

-- "<total>" or "<total>:<cost>" -> total before the entry, total after it (nil: not ours)
local function totals(member)
  local before = tonumber(member)
  if before then return before, before + 1 end
  local b, c = string.match(member, '^(%d+):(%d+)$')
  if b then return tonumber(b), b + c end
end

local rules = #KEYS - 2
-- per rule i, at 8i-7 .. 8i: limit, window µs, cost, used, total after the newest entry,
-- newest score, oldest member and oldest score in the window (false when none); one table for
-- the whole call, sized up front for the usual single rule
local state = { 0, 0, 0, 0, 0, 0, 0, 0 }
local fits = true

-- Pass 1: measure every window; record nothing yet.
for i = 1, rules do
  local log, a = KEYS[i + 2], 5 * i - 1
  local limit, window, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  if overrides then
    limit = overrides['limit:' .. ARGV[a]] or limit
    window = overrides['window:' .. ARGV[a]] or window
  end
  -- the caller validates; checked again because a bad number here would write nonsense
  if not (limit and window and cost and limit >= 1 and window >= 1 and cost >= 1 and cost % 1 == 0) then
    return redis.error_reply('slidegate: rule ' .. i .. ' needs a limit >= 1, a window >= 1 ms and a whole cost >= 1')
  end
  window = window * 1000
  -- What has left the window goes first: the oldest entry left is then the one to read, and
  -- the log never holds more than its window.
  -- (numbers cross into Redis as text: "%d" spares the float formatting Redis would apply,
  -- and "+ 0" reads a score with one parse where tonumber takes two)
  call('ZREMRANGEBYSCORE', log, '-inf', format('%d', now - window))
  local used, total, newest, oldest, since = 0, 0, false, false, false
  local e = call('ZRANGE', log, '-1', '-1', 'WITHSCORES')
  if e[1] then
    local _, after = totals(e[1])
    newest = e[2] + 0
    if after and newest <= now + window then
      total = after
      local f = call('ZRANGE', log, '0', '0', 'WITHSCORES')
      -- A log's clock never runs back: read by a clock behind its newest entry, the window
      -- ends at that entry, so what once left the window stays out whoever's clock asks next.
      if newest > now and f[2] + 0 <= newest - window then
        f = call('ZRANGE', log, format('%d', newest - window + 1), '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')
      end
      local before = totals(f[1])
      if before and before < total then
        used, oldest, since = total - before, f[1], f[2] + 0
      else
        total = nil
      end
    else
      total = nil
    end
    if not total then
      -- Not a log this script wrote (a member it cannot read, totals out of order, an entry
      -- more than a window ahead of the clock): start the window afresh.
      call('DEL', log)
      used, total, newest, oldest, since = 0, 0, false, false, false
    end
  end
  local k = 8 * i
  state[k - 7], state[k - 6], state[k - 5], state[k - 4] = limit, window, cost, used
  state[k - 3], state[k - 2], state[k - 1], state[k] = total, newest, oldest, since
  if used + cost > limit and ARGV[a + 4] ~= '1' then fits = false end
end

-- The wait until `cost` fits into a log holding `used` (> limit - cost): the arrival of the
-- entry whose running total reaches total + cost - limit, plus a window. Ranks from the
-- oldest entry in the window on are in arrival order with growing totals: binary search.
local function retry_after(log, window, limit, cost, total, oldest, since)
  if cost > limit then return -1 end
  local target = total + cost - limit
  local first = totals(oldest)
  -- every entry weighs at least 1, so the answer is at most this many ranks past the oldest
  local span = target - first - 1
  if span <= 0 then return math.ceil((since + window - now) / 1000) end
  local lo = call('ZRANK', log, oldest)
  local hi, at = lo + span, false
  for _ = 1, 64 do
    if lo >= hi then break end
    local mid = math.floor((lo + hi) / 2)
    local e = call('ZRANGE', log, mid, mid, 'WITHSCORES')
    -- past the newest entry counts as reached: the newest entry always reaches the target
    local reached = true
    if e[1] then
      local _, after = totals(e[1])
      reached = not after or after >= target
    end
    if reached then hi, at = mid, e[2] and tonumber(e[2]) else lo = mid + 1 end
  end
  if not at then
    local e = call('ZRANGE', log, hi, hi, 'WITHSCORES')
    at = tonumber(e[2])
    -- unreachable for a log this script wrote; a full window is always long enough
    if not at then return math.ceil(window / 1000) end
  end
  return math.ceil((at + window - now) / 1000)
end

-- Pass 2: all or nothing over the enforced rules. A denied request records nothing, so a
-- throttled caller cannot push its own window forward. A shadow rule records what it would
-- have admitted, so its would-deny count stays what enforcing it would give.
local out = { fits and 1 or 0, 0, 0, 0, 0, 0 }
for i = 1, rules do
  local log, k = KEYS[i + 2], 8 * i
  local limit, window, cost, used = state[k - 7], state[k - 6], state[k - 5], state[k - 4]
  local total, newest, oldest, since = state[k - 3], state[k - 2], state[k - 1], state[k]
  local retry = 0
  if used + cost > limit then
    retry = retry_after(log, window, limit, cost, total, oldest, since)
  elseif fits then
    local score = now
    if newest and newest >= now then score = newest + 1 end
    call('ZADD', log, format('%d', score), cost > 1 and format('%d:%d', total, cost) or format('%d', total))
    local eighth = window / 8
    -- a bumped entry (the clock behind the newest one) refreshes too: its window ends later
    -- than the clock alone says; so does a key's own window, which may just have grown
    if not newest or score ~= now or score - score % eighth ~= newest - newest % eighth
      or (overrides and overrides['window:' .. ARGV[5 * i - 1]]) then
      call('PEXPIRE', log, math.ceil((score + window + eighth - now) / 1000))
    end
    used = used + cost
    if not since then since = score end
  end
  local o = 5 * i - 3
  out[o], out[o + 1], out[o + 2] = math.max(limit - used, 0), since and math.ceil((since + window - now) / 1000) or 0, retry
  out[o + 3], out[o + 4] = limit, window / 1000
end
return out
