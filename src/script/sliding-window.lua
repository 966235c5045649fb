#!lua flags=allow-key-locking
--[[
  slidegate: one exact sliding-window-log decision for every rule a request matches.

  Atomic by construction: Redis runs the whole script before any other command, so
  "count, decide, record" cannot interleave across the fleet.

  Total by construction: whatever subset of its keys was deleted, evicted or expired between
  calls, the keys that are left are each a consistent log, so every reply is well formed; a key
  holding a value of another type (written by hand) is read as no log, no registry entry, or a
  block by its TTL, never an error. The
  work per call is at most 2 calls for the block and 1 for the registry (of the fields the call
  uses, whatever else its entry holds), then per log 2 reads
  and 4 writes, per rule 1 read and 1 write, plus (only for a rule that does not fit and waits
  for more than its oldest entry) 2 + ceil(log2(units to wait for)) reads in a loop of at most
  64 steps: at most 22 on a log written under limits up to 1,000,000 (the most a rule or a
  key's own limit can be), at most 46 on one whose totals a hand wrote (a wait of 1e13 units
  or more is not searched). Every call is O(log n) but ZREMRANGEBYSCORE, which removes entries earlier
  calls recorded, each once (a log that starts afresh, or whose every entry has left the
  window, is UNLINKed: Redis frees a large one outside the call).

  KEYS (all of one identity share a {hash tag}, so this stays cluster-safe):
    KEYS[1]      the operator's block: a string holding when it ends (µs, on this script's
                 clock); its TTL only collects it
    KEYS[2]      the API key's registry entry: a hash with `tier`, `disabled` ("1"), and
                 per-rule overrides `limit:<rule>`, `window:<rule>` (ms); read in this same
                 call, so a change to it holds from the next decision anywhere. A field the
                 admin API would not write (a tier that is no name, an override out of range or
                 past 1000 per ms of its window) is read as absent
    KEYS[2 + i]  the log of rule i: a sorted set with one entry per recorded request,
                 score = arrival time in µs, member = the log's running total of cost before
                 the entry, as "<total>", or "<total>:<cost>" when the entry weighs more than 1.
                 Rules that see the same requests at the same cost may name one log: it is
                 kept for the longest of their windows, each rule counts the part inside its
                 own, and an admitted request is recorded in it once (a rule of another cost,
                 or a shadow rule, on it is refused before anything is written). An extra rule
                 then costs one read where a log of its own costs four calls.
  ARGV:
    [1]  now in whole µs from 0 to 2^52, or "" to take Redis TIME (one clock for the whole fleet)
    [2]  the tier whose rules follow
    [3]  the tier when the registry holds no entry for the key: its configured tier; "" for
         a key nobody knows (answered { 3 }); "-" for a caller that is not a key (the
         registry is not read)
    then five per rule i, from j = 5i - 1: [j] name, [j+1] limit (at most 1000 per ms of the
    window: see below), [j+2] window in ms, [j+3]
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
  so a clock that was stepped back never brings entries back. (In a shared log, "the window"
  is the longest one: a clock stepped back can count again, for a shorter rule, an entry that
  left only that rule's window — stricter, never looser.) That holds for a step back of up to
  a window: a log whose newest entry stands more than a window ahead of the clock asking is
  taken for one this script did not write, and starts afresh. After a clock stepped back
  further, a caller gets one more window's quota, rather than no quota for as long as the
  step; so with the edge clock the isolates' clocks must agree to well within the shortest
  window, or each that runs behind restarts the others' logs. A burst at one clock reading runs
  ahead too, 1 µs an entry: so a rule's limit is at most its window in µs, which keeps the
  newest entry of a full window within a window of the clock that wrote it (a limit past that,
  from the caller or a key's own, would let a burst start its log afresh without end).

  The log's TTL is refreshed when a write starts a new eighth of its (longest) window (or is
  placed ahead of the clock, or the key has its own window) rather than on every write: each
  refresh sets it to a window and an eighth past the new entry, so it still covers a window
  past any entry written later in the same eighth. A log whose rule has a key's own window is
  kept for the configured window too, whichever is longer (and an eighth of that one): when
  the override goes, the entries in the log still count. (A rule whose configured window grows catches up within an eighth
  of the new window.)
]]

local call, format = redis.call, string.format

local now = ARGV[1]
if now == '' then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
  -- from 0 to 2^52 µs (the year 2112): a log's scores, up to a window past it, then stay
  -- integers a double holds exactly, so no two entries can share a score
  if not (now and now % 1 == 0 and now >= 0 and now < 4503599627370496) then
    return redis.error_reply('slidegate: now must be whole microseconds from 0 to 2^52')
  end
end

-- pcall: a value of another type here (written by hand, or by another application on the
-- same prefix) is a block this script did not write, read by its TTL like any other
local block = redis.pcall('GET', KEYS[1])
if block then
  -- a time only as the admin API writes one, in decimal digits: tonumber also takes "nan",
  -- "inf" (read as times, a block that was no block, or one the integer reply wraps), hex
  -- floats and a signed hex, which JavaScript's Number refuses where it takes "0b11" and
  -- Unicode spaces, so the admin API's reading of the block (limiter.ts, blockLeft) would differ
  local ends = type(block) == 'string' and string.find(block, '^%d+$') and tonumber(block)
  -- (digits past what a double holds read as inf: a time no more than "nan" is)
  if ends and ends < math.huge then
    if ends > now then return { 2, math.ceil((ends - now) / 1000) } end
  else
    -- not written by slidegate's admin API: the key's own TTL says how long it holds
    local ttl = call('PTTL', KEYS[1])
    if ttl == -1 then return { 2, -1 } end
    if ttl >= 0 then return { 2, math.max(ttl, 1) } end
  end
end

-- The registry: one read of the fields this call uses (its tier, whether it is disabled, and the
-- overrides of the rules asked about), whatever else the entry holds: a hash a hand or another
-- application filled would otherwise be copied whole into every decision of the key. An override
-- outside what the admin API writes (a whole limit from 1 to 1,000,000, a whole window from 1 ms
-- to 366 days) is no override: written by hand, it would otherwise give replies the gate refuses
-- as a store's nonsense, and a key that always fails. A value of another type than a hash is no
-- entry (it is left as it is: it is not this script's to repair).
local rules = #KEYS - 2
local overrides = false
local fallback = ARGV[3]
if fallback ~= '-' then
  -- one rule (most keys' calls) names its fields in the call itself: the table and unpack of the
  -- general case cost a key's decision about 3% more (callgrind, instructions per call)
  local fields, entry = false
  if rules == 1 then
    entry = redis.pcall('HMGET', KEYS[2], 'tier', 'disabled', 'limit:' .. ARGV[4], 'window:' .. ARGV[4])
  else
    fields = { 'tier', 'disabled' }
    for i = 1, rules do
      local name = ARGV[5 * i - 1]
      fields[2 * i + 1], fields[2 * i + 2] = 'limit:' .. name, 'window:' .. name
    end
    entry = redis.pcall('HMGET', KEYS[2], unpack(fields))
  end
  if entry.err then entry = {} end
  if entry[2] == '1' then return { 4 } end
  for j = 3, 2 * rules + 2 do
    local value = entry[j]
    if value and string.find(value, '^%d+$') then
      local n = tonumber(value)
      if n >= 1 and n <= (j % 2 == 1 and 1000000 or 31622400000) then
        overrides = overrides or {}
        overrides[fields and fields[j] or (j == 3 and 'limit:' or 'window:') .. ARGV[4]] = n
      end
    end
  end
  -- a tier only as the configuration names one (NAME_PATTERN, limiter.ts): any other, written by
  -- hand, is no tier field, as an override out of range is no override. Answered as the key's
  -- tier (or "", as a key nobody knows, for a key with a configured tier), the gate refuses the
  -- reply as a store's nonsense, and every decision of the key fails (open by default: no limit).
  -- The tier asked about is one the gate sent, a name already: only another is checked.
  local tier = entry[1]
  if tier ~= ARGV[2] and not (tier and #tier <= 32 and string.find(tier, '^[A-Za-z0-9_%-]+$')) then tier = fallback end
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

-- A log's first reads, for both paths below: its newest entry gives the running total and the
-- newest score (0, false: an empty log), then what has left `window` (its longest) goes, so the
-- log never holds more than that window.
-- (numbers cross into Redis as text: "%d" spares the float formatting Redis would apply,
-- and "+ 0" reads a score with one parse where tonumber takes two)
local function open_log(key, window)
  -- pcall: a value of another type here is not a log this script wrote; it starts afresh
  local e = redis.pcall('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if not e[1] then
    if e.err then call('UNLINK', key) end
    return 0, false
  end
  local _, after = totals(e[1])
  local newest = e[2] + 0
  -- the newest entry first: a log that has left the window whole goes as one key, where
  -- ZREMRANGEBYSCORE would free its entries one by one inside this call (1,000,000 of them, a
  -- burst of the largest limit, held every tenant some 440 ms)
  if after and newest > now - window and newest <= now + window then
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - window))
    return after, newest
  end
  -- Gone from the window, or not a log this script wrote (a member it cannot read, an entry more
  -- than a window ahead of the clock): start the window afresh. UNLINK, not DEL: Redis frees a
  -- large log in a thread of its own, where DEL would free every entry inside this call, holding
  -- every tenant meanwhile.
  call('UNLINK', key)
  return 0, false
end

-- A rule's part of a log opened for `longest`: used, and the oldest member and score in the
-- rule's window (0, false, false: none); nothing when the log is not one this script wrote
-- (totals out of order, a member it cannot read), which is then deleted for the caller to start
-- afresh. A log's clock never runs back: read by a clock behind its newest entry, the window
-- ends at that entry, so what once left the window stays out whoever's clock asks next.
local function window_of(key, window, longest, total, newest)
  -- evicted by this very window: the first entry is the oldest in it
  local f = newest <= now and window == longest and call('ZRANGE', key, '0', '0', 'WITHSCORES')
    or call('ZRANGE', key, format('%d', math.max(now, newest) - window + 1), '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')
  if not f[1] then return 0, false, false end
  local before = totals(f[1])
  if before and before < total then return total - before, f[1], f[2] + 0 end
  call('UNLINK', key)
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
  -- totals no slidegate wrote (a fraction, or more than any log holds, which no rank can reach
  -- and Lua would hand Redis in exponent form): no rank to search for; a full window, as for
  -- any log it did not write
  if not (span < 1e13) or span % 1 ~= 0 then return math.ceil(window / 1000) end
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

-- no rule covers the request (an API key asked about for its registry entry alone): nothing
-- to count, and the reply holds no rule
if rules == 0 then return { 1 } end
-- Rules on one log (one rule, or rules that see the same requests at the same cost) and no key's
-- own numbers for them: most decisions. The same steps as the general path below, with the
-- first rule in locals and the others in one small table. Redis runs a script's Lua far slower
-- than its own commands: the general path's per-rule and per-log tables and its loops cost, for
-- one rule, about what the seed script's whole decision does (docs/benchmarks.md, section a).
-- The model-based tests hold both paths to one model.
local key = KEYS[3]
local one_log = not overrides
for i = 4, #KEYS do
  if KEYS[i] ~= key then
    one_log = false
    break
  end
end
if one_log then
  local limit, window, cost = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  if not (limit and window and cost and limit >= 1 and window >= 1 and window < 1e12 and limit <= window * 1000 and cost >= 1 and cost % 1 == 0) then
    return redis.error_reply('slidegate: rule 1 needs a limit from 1 to 1000 per ms of its window, a window from 1 ms to 1e12 ms and a whole cost >= 1')
  end
  local longest = window
  -- rule i past the first, at m = 5i - 10: limit, window µs, used, oldest score and oldest member
  -- in its window (false when none)
  local more = rules > 1 and {} or false
  for i = 2, rules do
    local a = 5 * i - 1
    local l, w, c = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if not (l and w and c and l >= 1 and w >= 1 and w < 1e12 and l <= w * 1000 and c >= 1 and c % 1 == 0) then
      return redis.error_reply('slidegate: rule ' .. i .. ' needs a limit from 1 to 1000 per ms of its window, a window from 1 ms to 1e12 ms and a whole cost >= 1')
    end
    if c ~= cost then return redis.error_reply('slidegate: rule ' .. i .. ' shares a log with a rule of another cost') end
    if ARGV[a + 4] == '1' or ARGV[8] == '1' then
      return redis.error_reply('slidegate: rule ' .. i .. ' shares a log with a shadow rule, or is one')
    end
    if w > longest then longest = w end
    local m = 5 * i - 10
    more[m + 1], more[m + 2], more[m + 3], more[m + 4], more[m + 5] = l, w * 1000, 0, false, false
  end
  window, longest = window * 1000, longest * 1000
  local total, newest = open_log(key, longest)
  local used, oldest, since = 0, false, false
  -- each rule's window; a log this script did not write starts afresh for every rule on it
  if newest then
    used, oldest, since = window_of(key, window, longest, total, newest)
    if not used then used, oldest, since, total, newest = 0, false, false, 0, false end
  end
  for m = 0, 5 * rules - 10, 5 do
    if not newest then break end
    local u, o, t = window_of(key, more[m + 2], longest, total, newest)
    if u then
      more[m + 3], more[m + 4], more[m + 5] = u, t, o
    else
      total, newest = 0, false
      used, oldest, since = 0, false, false
      for j = 0, m - 5, 5 do
        more[j + 3], more[j + 4], more[j + 5] = 0, false, false
      end
    end
  end
  -- all or nothing: one entry records the request for every rule, or none does
  local fits = used + cost <= limit
  for m = 0, 5 * rules - 10, 5 do
    if more[m + 3] + cost > more[m + 1] then fits = false end
  end
  local at = false
  if fits then
    at = now
    if newest and newest >= now then at = newest + 1 end
    call('ZADD', key, format('%d', at), cost > 1 and format('%d:%d', total, cost) or format('%d', total))
    local eighth = longest / 8
    if not newest or at ~= now or at - at % eighth ~= newest - newest % eighth then
      call('PEXPIRE', key, math.ceil((at + longest + eighth - now) / 1000))
    end
  end
  -- a shadow rule (never on a log with another) is decided and reported, never enforced
  local out = { (fits or ARGV[8] == '1') and 1 or 0, 0, 0, 0, limit, window / 1000 }
  if used + cost > limit then
    out[4] = retry_after(key, window, limit, cost, total, oldest, since)
  elseif at then
    used = used + cost
    since = since or at
  end
  out[2], out[3] = math.max(limit - used, 0), since and math.ceil((since + window - now) / 1000) or 0
  for i = 2, rules do
    local m, o = 5 * i - 10, 5 * i - 3
    local l, w, u, s = more[m + 1], more[m + 2], more[m + 3], more[m + 4]
    local retry = 0
    if u + cost > l then
      retry = retry_after(key, w, l, cost, total, more[m + 5], s)
    elseif at then
      u = u + cost
      s = s or at
    end
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = math.max(l - u, 0), s and math.ceil((s + w - now) / 1000) or 0, retry, l, w / 1000
  end
  return out
end
-- Per rule i, at 8i-7 .. 8i: limit, window µs, cost, log slot, used, oldest member and oldest
-- score in its window (false when none), fits. Per log slot s, at 7s-6 .. 7s: key, longest
-- window µs, cost, total after the newest entry, newest score (false when none), the longest
-- configured window µs of a rule on it that has a key's own window (false when none), and true
-- (record) / false (do not) / the score recorded.
-- Two tables for the whole call (one rule without a key's own numbers took the path above).
local rule = { 0, 0, 0, 0, 0, 0, 0, 0 }
local log = { 0, 0, 0, 0, 0, 0, 0 }
local slot_of = rules > 1 and {} or false
local shadow_of = rules > 1 and {} or false
local slots = 0

-- Pass 1: every rule's numbers, checked before anything is written; a log named by several
-- rules is one log, kept for the longest of their windows.
for i = 1, rules do
  local key, a = KEYS[i + 2], 5 * i - 1
  local limit, window, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local own, configured = false, window
  if overrides then
    local l, w = overrides['limit:' .. ARGV[a]] or limit, overrides['window:' .. ARGV[a]]
    -- a key's own numbers that count more than a log can (the limit above the window's µs; see
    -- the rule's check below) are no override of the rule, as the admin API refuses to write them
    if l and window and l <= (w or window) * 1000 then limit, own, window = l, w, w or window end
  end
  -- the caller validates; checked again because a bad number here would write nonsense (an
  -- infinite window would fail the TTL after the entry is written, and leave a log without one;
  -- a limit above the window's µs would admit without bound: its entries, a µs apart at least,
  -- run more than a window ahead of a burst's clock, and the log starts afresh)
  if not (limit and window and configured and cost and limit >= 1 and window >= 1 and window < 1e12 and limit <= window * 1000 and configured >= 1 and configured < 1e12 and cost >= 1 and cost % 1 == 0) then
    return redis.error_reply('slidegate: rule ' .. i .. ' needs a limit from 1 to 1000 per ms of its window, a window from 1 ms to 1e12 ms and a whole cost >= 1')
  end
  window = window * 1000
  -- a key's own window: its log also lives as long as the configured one, so that when the
  -- override goes (or shrinks) the entries already in it are not lost to a TTL it set
  local keep = own and configured * 1000
  local s = slot_of and slot_of[key]
  if not s then
    slots = slots + 1
    s = slots
    if slot_of then
      slot_of[key] = s
      shadow_of[s] = ARGV[a + 4] == '1'
    end
    local b = 7 * s
    log[b - 6], log[b - 5], log[b - 4], log[b - 1], log[b] = key, window, cost, keep, true
  else
    local b = 7 * s
    -- one entry per request in a shared log, recorded when the request is admitted: its rules
    -- must weigh a request alike and be enforced (a shadow rule records what it alone admits)
    if log[b - 4] ~= cost then
      return redis.error_reply('slidegate: rule ' .. i .. ' shares a log with a rule of another cost')
    end
    if ARGV[a + 4] == '1' or shadow_of[s] then
      return redis.error_reply('slidegate: rule ' .. i .. ' shares a log with a shadow rule, or is one')
    end
    if window > log[b - 5] then log[b - 5] = window end
    if keep and (not log[b - 1] or keep > log[b - 1]) then log[b - 1] = keep end
  end
  local k = 8 * i
  rule[k - 7], rule[k - 6], rule[k - 5], rule[k - 4] = limit, window, cost, s
end

-- Pass 2: each log once (open_log).
for s = 1, slots do
  local b = 7 * s
  log[b - 3], log[b - 2] = open_log(log[b - 6], log[b - 5])
end

-- Pass 3: each rule's window, from its oldest entry (window_of).
for i = 1, rules do
  local k = 8 * i
  local window, s = rule[k - 6], rule[k - 4]
  local b = 7 * s
  local used, oldest, since = 0, false, false
  if log[b - 2] then
    used, oldest, since = window_of(log[b - 6], window, log[b - 5], log[b - 3], log[b - 2])
    if not used then
      -- the rules before this one that read the log start afresh with it
      used, oldest, since = 0, false, false
      log[b - 3], log[b - 2] = 0, false
      for j = 1, i - 1 do
        if rule[8 * j - 4] == s then rule[8 * j - 3], rule[8 * j - 2], rule[8 * j - 1] = 0, false, false end
      end
    end
  end
  rule[k - 3], rule[k - 2], rule[k - 1] = used, oldest, since
end

-- All or nothing over the enforced rules. A denied request records nothing, so a throttled
-- caller cannot push its own window forward. A shadow rule records what it would have
-- admitted, so its would-deny count stays what enforcing it would give; a log records only
-- when every rule on it fits.
local fits = true
for i = 1, rules do
  local k = 8 * i
  local ok = rule[k - 3] + rule[k - 5] <= rule[k - 7]
  rule[k] = ok
  if not ok then
    log[7 * rule[k - 4]] = false
    if ARGV[5 * i + 3] ~= '1' then fits = false end
  end
end


local out = { fits and 1 or 0, 0, 0, 0, 0, 0 }
for i = 1, rules do
  local k = 8 * i
  local limit, window, cost, s = rule[k - 7], rule[k - 6], rule[k - 5], rule[k - 4]
  local used, oldest, since = rule[k - 3], rule[k - 2], rule[k - 1]
  local b = 7 * s
  local retry = 0
  if not rule[k] then
    retry = retry_after(log[b - 6], window, limit, cost, log[b - 3], oldest, since)
  elseif fits then
    local at = log[b]
    if at == true then
      local key, longest, total, newest = log[b - 6], log[b - 5], log[b - 3], log[b - 2]
      at = now
      if newest and newest >= now then at = newest + 1 end
      call('ZADD', key, format('%d', at), cost > 1 and format('%d:%d', total, cost) or format('%d', total))
      local eighth = longest / 8
      -- a bumped entry (the clock behind the newest one) refreshes too: its window ends later
      -- than the clock alone says; so does a key's own window, which may just have grown, and
      -- which keeps the log for its configured window as well
      local keep = log[b - 1]
      if not newest or at ~= now or at - at % eighth ~= newest - newest % eighth or keep then
        -- an eighth of the window it is kept for: a later write that skips the refresh (in the
        -- same eighth of a window that may be that longer configured one) stays covered
        local span = keep and keep > longest and keep or longest
        call('PEXPIRE', key, math.ceil((at + span + span / 8 - now) / 1000))
      end
      log[b] = at
    end
    if at then
      used = used + cost
      if not since then since = at end
    end
  end
  local o = 5 * i - 3
  out[o], out[o + 1], out[o + 2] = math.max(limit - used, 0), since and math.ceil((since + window - now) / 1000) or 0, retry
  out[o + 3], out[o + 4] = limit, window / 1000
end
return out
