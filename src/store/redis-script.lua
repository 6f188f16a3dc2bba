-- SPDX-License-Identifier: MIT
-- divvyd's Redis/Valkey store (issue #16): the ONE script, run once per batch.
--
--   EVALSHA <sha> <n> key1..keyN <now_usec or 0> <14 args of hit 1> ... <14 args of hit N>
--
-- now_usec 0: the server's TIME. Per hit (redis-script.h, REDIS_SCRIPT_ARG_*):
--   compat algorithm op count creditLimit resetSeconds burst refillSeconds strict d0 d1
--   group at_usec (0: the call's now) window (0 first-hit, 1 aligned: core/algorithm.h's AlgoWindow)
-- Reply: 5 integers per hit: allowed (0/1) credit reset limit retry.
--
-- Per hit the same as core/algorithm.c's algo_apply() and store.c's apply_hits(): hits in
-- order see each other's changes; consecutive hits with the same non-zero group are all or
-- nothing. Changes are written once at the end. divvyd's own keys hold "<algo>:<w0>:<w1>"
-- (sliding window: "1:<w0>:<prev>:<cur>", the two halves of w1) with PEXPIREAT ceil(w0/1000);
-- compat keys (divvy 1.7) hold the credit left with a TTL set once (SETEX).
--
-- Numbers are doubles: every value stays an integer below 2^53 (exact) under the limits
-- redis-script.c enforces (now <= 2^52, a counter's span <= 2^52 - 1 us); products that do
-- not fit are taken exactly with base-2^24 limbs (mul_div). The one difference from C: w0
-- is also capped at 2^53 - 1, which only the debt of a token bucket whose burst takes more
-- than (2^53 - now) / 2 us to refill (114 years in 2026) can reach (both: one burst of debt).

if redis.replicate_commands then
  pcall(redis.replicate_commands) -- Redis < 5: TIME before writes
end

local NARGS = 14
local USEC = 1000000
local TWO24 = 16777216
local TWO53 = 9007199254740992
local W0_CAP = 9007199254740991 -- 2^53 - 1
local NOW_MAX = 4503599627370496 -- 2^52
local floor, fmod, min = math.floor, math.fmod, math.min

-- exact floor(a / b) and a mod b, integers 0 <= a < 2^53, 0 < b < 2^53 (fmod is exact)
local function divmod(a, b)
  local r = fmod(a, b)
  return (a - r) / b, r
end

local function div_up(a, b)
  local q, r = divmod(a, b)
  if r ~= 0 then q = q + 1 end
  return q
end

-- x < 2^53 as base-2^24 limbs
local function limbs(x)
  local x0 = fmod(x, TWO24)
  x = (x - x0) / TWO24
  local x1 = fmod(x, TWO24)
  return x0, x1, (x - x1) / TWO24
end

-- the exact product a * b (both < 2^53) as 6 normalized base-2^24 limbs, low first
local function mul(a, b)
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local p = { a0 * b0, a0 * b1 + a1 * b0, a0 * b2 + a1 * b1 + a2 * b0, a1 * b2 + a2 * b1, a2 * b2, 0 }
  for i = 1, 5 do
    local c = floor(p[i] / TWO24)
    p[i] = p[i] - c * TWO24
    p[i + 1] = p[i + 1] + c
  end
  return p
end

local function cmp(p, q)
  for i = 6, 1, -1 do
    if p[i] ~= q[i] then
      if p[i] < q[i] then return -1 end
      return 1
    end
  end
  return 0
end

-- a * b / c rounded down (or up), all < 2^53, c > 0, the result known to be below 2^53
local function mul_div(a, b, c, up)
  local x = a * b
  if x < TWO53 then -- exact
    local q, r = divmod(x, c)
    if up and r ~= 0 then q = q + 1 end
    return q
  end
  local target = mul(a, b)
  local q = floor(x / c) -- within a few units
  if q > W0_CAP then q = W0_CAP end
  for _ = 1, 64 do
    if q > 0 and cmp(mul(q, c), target) > 0 then q = q - 1 else break end
  end
  for _ = 1, 64 do
    if cmp(mul(q + 1, c), target) <= 0 then q = q + 1 else break end
  end
  if up and cmp(mul(q, c), target) ~= 0 then q = q + 1 end
  return q
end

local function secs_up(d) return div_up(d, USEC) end

local function retry_of(wait)
  local s = secs_up(wait)
  if s > 0 then return s end
  return 1
end

local function until_full(w0, now)
  if w0 > now then return secs_up(w0 - now) end
  return 0
end

local function same(a, b)
  return a.w0 == b.w0 and a.a == b.a and a.b == b.b
end

local ABSENT = { w0 = 0, a = 0, b = 0 }

-- Each algorithm: (p, op, n, now, st) -> allowed, credit, limit, reset, retry, new state or
-- nil (nothing written). op: core/algorithm.h's AlgoOp (redis-script.c asserts the numbers):
-- 0 TAKE, 1 PEEK, 2 CHARGE, 3 REFUND, 4 RESET. States: { w0, a, b }.
local TAKE, PEEK, CHARGE, REFUND, RESET = 0, 1, 2, 3, 4

---- fixed window: w0 = the window's end, a = the credit left

-- the end of the window a hit at now opens: reset after it, or aligned at the next multiple of
-- reset since the epoch
local function fw_window_end(now, reset, aligned)
  local d = reset * USEC
  if aligned then now = now - fmod(now, d) end
  local e = now + d
  if e < W0_CAP then return e end
  return W0_CAP
end

local function fixed_apply(p, op, n, now, st)
  local limit = p.limit
  local live = st.w0 > now
  if op == TAKE or op == PEEK then
    local ok, credit, reset, retry, s
    if not live then
      if n > limit then
        return false, limit, limit, 0, -1, nil
      elseif n == 0 then
        return true, limit, limit, 0, 0, nil
      end
      s = { w0 = fw_window_end(now, p.reset, p.aligned), a = limit - n, b = 0 }
      ok, credit, reset, retry = true, s.a, secs_up(s.w0 - now), 0
    else
      local left = secs_up(st.w0 - now)
      if n > limit then
        return false, st.a, limit, left, -1, nil
      elseif n <= st.a then
        s = { w0 = st.w0, a = st.a - n, b = 0 }
        ok, credit, reset, retry = true, s.a, left, 0
      else
        return false, st.a, limit, left, left, nil
      end
    end
    if op == TAKE and n > 0 then return ok, credit, limit, reset, retry, s end
    return ok, credit, limit, reset, retry, nil
  elseif op == CHARGE then
    local s = st
    if not live then s = { w0 = fw_window_end(now, p.reset, p.aligned), a = limit, b = 0 } end
    local fit = n <= s.a
    local ns = { w0 = s.w0, a = s.a - min(n, s.a), b = 0 }
    local left = secs_up(ns.w0 - now)
    local retry = 0
    if not fit then retry = left end
    return fit, ns.a, limit, left, retry, ns
  else -- REFUND
    if not live then return true, limit, limit, 0, 0, nil end
    local a = st.a
    if a < limit then a = a + min(n, limit - a) end
    local ns = nil
    if a ~= st.a then ns = { w0 = st.w0, a = a, b = 0 } end
    return true, a, limit, secs_up(st.w0 - now), 0, ns
  end
end

---- sliding window: w0 = the end of the window after the current one, a = previous count,
---- b = current count (C: w1 = a << 32 | b); r = d0 = resetSeconds in us

local function sw_load(st, now, r, aligned)
  if st.w0 <= now then -- absent or expired: a window anchored now, or the aligned one holding now
    if aligned then return { prev = 0, cur = 0, e = now - fmod(now, r) + r } end
    return { prev = 0, cur = 0, e = now + r }
  end
  local e2 = (now - st.w0) + 2 * r
  if e2 < 0 then e2 = 0 end
  if e2 >= r then return { prev = st.b, cur = 0, e = st.w0 } end
  return { prev = st.a, cur = st.b, e = st.w0 - r }
end

local function sw_store(s, r)
  if s.cur > 0 then return { w0 = s.e + r, a = s.prev, b = s.cur } end
  if s.prev > 0 then return { w0 = s.e, a = 0, b = s.prev } end
  return ABSENT
end

local function sw_estimate(s, now, r)
  local left = 0
  if s.e > now then left = min(s.e - now, r) end
  return mul_div(s.prev, left, r, true) + s.cur
end

local function sw_wait(s, now, r, limit, n)
  local m = limit - n
  local t
  if sw_estimate(s, now, r) <= m then return 0 end
  if s.cur > m then
    t = s.e + r - mul_div(m, r, s.cur, false)
  else
    t = s.e - mul_div(m - s.cur, r, s.prev, false)
  end
  if t > now then return t - now end
  return 0
end

local function sliding_apply(p, op, n, now, st)
  local limit, r = p.limit, p.d0
  local s = sw_load(st, now, r, p.aligned)
  local est = sw_estimate(s, now, r)
  local credit = 0
  if est < limit then credit = limit - est end
  if op == TAKE or op == PEEK then
    if n > limit then return false, credit, limit, until_full(st.w0, now), -1, nil end
    if n <= credit then
      s.cur = s.cur + n
      local ns = sw_store(s, r)
      if op == PEEK or same(ns, st) then ns = nil end
      return true, credit - n, limit, until_full(sw_store(s, r).w0, now), 0, ns
    end
    local wait = retry_of(sw_wait(s, now, r, limit, n))
    return false, credit, limit, wait, wait, nil
  elseif op == CHARGE then
    local fit = n <= credit
    local take = min(n, credit)
    s.cur = s.cur + take
    local ns = sw_store(s, r)
    local retry = 0
    if not fit then retry = retry_of(sw_wait(s, now, r, limit, 1)) end
    return fit, credit - take, limit, until_full(ns.w0, now), retry, ns
  else -- REFUND
    if st.w0 <= now then return true, limit, limit, 0, 0, nil end
    local back = min(n, s.cur)
    s.cur = s.cur - back
    s.prev = s.prev - min(n - back, s.prev)
    local ns = sw_store(s, r)
    est = sw_estimate(s, now, r)
    credit = 0
    if est < limit then credit = limit - est end
    local full = until_full(ns.w0, now)
    if same(ns, st) then ns = nil end
    return true, credit, limit, full, 0, ns
  end
end

---- token bucket, continuous (GCRA): w0 = TAT; t = d0 (us per credit), tau = d1 = burst * t

local function tat_add(tat, n, t)
  local v = tat + n * t -- at or above 2^53 only if the true sum is
  if v < W0_CAP then return v end
  return W0_CAP
end

local function gcra_credit(tat, now, t, tau)
  local x = 0
  if tat > now then x = tat - now end
  if x < tau then return (divmod(tau - x, t)) end
  return 0
end

-- tat >= now, n <= burst: n * t <= tau, every term exact
local function gcra_wait(tat, now, t, tau, n)
  local d = (tat - now) + (n * t - tau)
  if d > 0 then return d end
  return 0
end

local function tat_state(tat, now)
  if tat > now then return { w0 = tat, a = 0, b = 0 } end
  return ABSENT
end

local function gcra_apply(p, op, n, now, st)
  local t, tau, burst = p.d0, p.d1, p.burst
  local tat = st.w0
  if tat < now then tat = now end
  if op == TAKE or op == PEEK then
    if n > burst then return false, gcra_credit(tat, now, t, tau), burst, until_full(st.w0, now), -1, nil end
    local ns, ok, credit, reset, retry
    if gcra_wait(tat, now, t, tau, n) == 0 then
      local ntat = tat + n * t
      ns = tat_state(ntat, now)
      ok, credit, reset, retry = true, gcra_credit(ntat, now, t, tau), until_full(ns.w0, now), 0
    else
      ns = st
      if p.strict and op == TAKE then
        tat = tat_add(now, div_up(tat - now, t), t)
        ns = { w0 = tat, a = 0, b = 0 }
      end
      local wait = retry_of(gcra_wait(tat, now, t, tau, n))
      ok, credit, reset, retry = false, gcra_credit(tat, now, t, tau), wait, wait
    end
    if op ~= TAKE or same(ns, st) then ns = nil end
    return ok, credit, burst, reset, retry, ns
  elseif op == CHARGE then
    local fit = n <= burst and gcra_wait(tat, now, t, tau, n) == 0
    local ntat = tat_add(tat, n, t)
    local most = now + 2 * tau -- one burst of debt (ALGO_DEBT_MAX_BURSTS); inexact only above W0_CAP
    if ntat > most then -- bounded, but a CHARGE never lowers TAT
      if tat > most then ntat = tat else ntat = most end
    end
    local ns = tat_state(ntat, now)
    local retry = 0
    if not fit then retry = retry_of(gcra_wait(ntat, now, t, tau, 1)) end
    return fit, gcra_credit(ntat, now, t, tau), burst, until_full(ns.w0, now), retry, ns
  else -- REFUND
    if st.w0 <= now then return true, burst, burst, 0, 0, nil end
    local back = n * t -- at or above 2^53 only if the true product is
    local ntat = now
    if back < st.w0 - now then ntat = st.w0 - back end
    local ns = tat_state(ntat, now)
    local full = until_full(ns.w0, now)
    local credit = gcra_credit(ntat, now, t, tau)
    if same(ns, st) then ns = nil end
    return true, credit, burst, full, 0, ns
  end
end

---- token bucket, discrete refills: w0 = u + ceil(d / A) * step, a = d the deficit;
---- step = d0 (us), A = d1 (credits per refill)

local function tb_load(st, now, step, amount)
  if st.w0 <= now or st.a == 0 then return { d = 0, u = now } end
  local d = st.a
  local back = div_up(d, amount) * step
  local u = 0
  if back < st.w0 then u = st.w0 - back end
  if now > u then
    local k = (divmod(now - u, step))
    d = d - min(k * amount, d)
    u = u + k * step
  end
  return { d = d, u = u }
end

-- (caps the debt so that w0 <= W0_CAP: b.d may change)
local function tb_store(b, step, amount)
  if b.d == 0 then return ABSENT end
  local steps = (divmod(W0_CAP - b.u, step))
  if b.d >= TWO53 or div_up(b.d, amount) > steps then b.d = steps * amount end
  return { w0 = b.u + div_up(b.d, amount) * step, a = b.d, b = 0 }
end

local function tb_wait(b, now, burst, step, amount, n)
  local room = burst - n
  if b.d <= room then return 0 end
  local t = b.u + div_up(b.d - room, amount) * step
  if t > now then return t - now end
  return 0
end

local function bucket_apply(p, op, n, now, st)
  local step, amount, burst = p.d0, p.d1, p.burst
  local b = tb_load(st, now, step, amount)
  local credit = 0
  if b.d < burst then credit = burst - b.d end
  if op == TAKE or op == PEEK then
    if n > burst then return false, credit, burst, until_full(st.w0, now), -1, nil end
    local ns, ok, c, reset, retry
    if b.d <= burst - n then
      b.d = b.d + n
      ns = tb_store(b, step, amount)
      ok, c, reset, retry = true, credit - n, until_full(ns.w0, now), 0
    else
      ns = st
      if p.strict and op == TAKE then
        b.u = now
        ns = tb_store(b, step, amount)
      end
      local wait = retry_of(tb_wait(b, now, burst, step, amount, n))
      ok, c, reset, retry = false, credit, wait, wait
    end
    if op ~= TAKE or same(ns, st) then ns = nil end
    return ok, c, burst, reset, retry, ns
  elseif op == CHARGE then
    local fit = n <= burst and b.d <= burst - n
    local most = 2 * burst -- one burst of debt (ALGO_DEBT_MAX_BURSTS); <= 2^53 as the span is
    if n > most or b.d > most - n then -- bounded, but a CHARGE never lowers the deficit
      if b.d < most then b.d = most end
    else
      b.d = b.d + n
    end
    local ns = tb_store(b, step, amount)
    local retry = 0
    if not fit then retry = retry_of(tb_wait(b, now, burst, step, amount, 1)) end
    local c = 0
    if b.d < burst then c = burst - b.d end
    return fit, c, burst, until_full(ns.w0, now), retry, ns
  else -- REFUND
    if st.w0 <= now then return true, burst, burst, 0, 0, nil end
    b.d = b.d - min(n, b.d)
    local ns = tb_store(b, step, amount)
    local c = 0
    if b.d < burst then c = burst - b.d end
    local full = until_full(ns.w0, now)
    if same(ns, st) then ns = nil end
    return true, c, burst, full, 0, ns
  end
end

---- divvy 1.7's keys (fixed window only): the credit left, TTL set once at the window's start.
---- An entry: { exists, v (credit left), ttl (s), created (SETEX it) }

local function compat_apply(p, op, n, e)
  local limit = p.limit
  if not e.exists then
    if op == REFUND then return true, limit, limit, 0, 0, nil end
    if op == CHARGE then
      local fit = n <= limit
      local retry = 0
      if not fit then retry = p.reset end
      return fit, limit - min(n, limit), limit, p.reset, retry,
        { exists = true, v = limit - min(n, limit), ttl = p.reset, created = true }
    end
    if n > limit then return false, limit, limit, 0, -1, nil end
    if n == 0 then return true, limit, limit, 0, 0, nil end
    local ne = nil
    if op == TAKE then ne = { exists = true, v = limit - n, ttl = p.reset, created = true } end
    return true, limit - n, limit, p.reset, 0, ne
  end
  local v = e.v
  if v < 0 then v = 0 end
  local ttl = e.ttl
  if ttl < 0 then ttl = 0 end -- a key without TTL (not written by divvy or divvyd)
  local wait = ttl
  if wait < 1 then wait = 1 end -- Redis's TTL rounds: under half a second left reads 0
  if op == TAKE or op == PEEK then
    if n > limit then return false, v, limit, ttl, -1, nil end
    if n <= v then
      local ne = nil
      if op == TAKE and n > 0 then ne = { exists = true, v = v - n, ttl = e.ttl, created = e.created } end
      return true, v - n, limit, ttl, 0, ne
    end
    return false, v, limit, ttl, wait, nil
  elseif op == CHARGE then
    local fit = n <= v
    local retry = 0
    if not fit then retry = wait end
    local nv = v - min(n, v)
    return fit, nv, limit, ttl, retry, { exists = true, v = nv, ttl = e.ttl, created = e.created }
  else -- REFUND: INCRBY capped at creditLimit, TTL kept
    local nv = v
    if nv < limit then nv = nv + min(n, limit - nv) end
    local ne = nil
    if nv ~= e.v then ne = { exists = true, v = nv, ttl = e.ttl, created = e.created } end
    return true, nv, limit, ttl, 0, ne
  end
end

---- the batch

local nkeys = #KEYS
if #ARGV ~= 1 + nkeys * NARGS then
  return redis.error_reply('ERR divvyd script: ' .. #ARGV .. ' arguments for ' .. nkeys .. ' keys')
end
local call_now = tonumber(ARGV[1])
if call_now == 0 then
  local tm = redis.call('TIME')
  call_now = tonumber(tm[1]) * USEC + tonumber(tm[2])
end
if call_now == nil or call_now > NOW_MAX then
  return redis.error_reply('ERR divvyd script: time out of range')
end

local cache, orig, touched = {}, {}, {}

local function load(key, compat)
  if cache[key] ~= nil then return cache[key] end
  local e
  local v = redis.call('GET', key) -- a key of another type: WRONGTYPE, before any write
  if compat then
    if v then
      -- DECRBY/INCRBY at the end would fail on anything but an integer, AFTER the writes of
      -- the keys before it (a script is not rolled back): refuse it now, nothing written.
      -- At most 15 digits: exact in a double.
      if not string.match(v, '^%-?%d%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$') then
        error({ err = 'ERR divvyd script: ' .. key .. ' does not hold an integer counter' })
      end
      e = { exists = true, v = tonumber(v), ttl = redis.call('TTL', key), created = false }
    else
      e = { exists = false }
    end
  else
    e = { exists = false, tag = -1, w0 = 0, a = 0, b = 0 }
    if v then
      local tag, w0, a, b = string.match(v, '^(%d+):(%d+):(%d+):?(%d*)$')
      e = { exists = true, tag = tonumber(tag) or -1, w0 = tonumber(w0) or 0, a = tonumber(a) or 0,
        b = tonumber(b) or 0 }
    end
  end
  cache[key] = e
  orig[key] = e
  touched[#touched + 1] = key
  return e
end

local APPLY = { [0] = fixed_apply, [1] = sliding_apply, [2] = gcra_apply }

local out = {}
local undo = {}
local group_ok = true
for i = 1, nkeys do
  local base = 1 + (i - 1) * NARGS
  local key = KEYS[i]
  local compat = ARGV[base + 1] == '1'
  local algo = tonumber(ARGV[base + 2])
  local op = tonumber(ARGV[base + 3])
  local n = tonumber(ARGV[base + 4])
  local p = { limit = tonumber(ARGV[base + 5]), reset = tonumber(ARGV[base + 6]),
    burst = tonumber(ARGV[base + 7]), refill = tonumber(ARGV[base + 8]), strict = ARGV[base + 9] == '1',
    d0 = tonumber(ARGV[base + 10]), d1 = tonumber(ARGV[base + 11]), aligned = ARGV[base + 14] == '1' }
  local group = ARGV[base + 12]
  local now = tonumber(ARGV[base + 13])
  if now == 0 then now = call_now end
  if now == nil or now > NOW_MAX or op == nil or op < TAKE or op > RESET or n == nil
    or p.limit == nil or algo == nil
    or (compat and (algo ~= 0 or p.aligned)) then
    return redis.error_reply('ERR divvyd script: bad arguments of hit ' .. i)
  end
  if group ~= '0' and (i == 1 or ARGV[base + 12 - NARGS] ~= group) then
    undo = {}
    group_ok = true
  end

  local e = load(key, compat)
  local ok, credit, limit, reset, retry, ne
  if op == RESET then -- delete; credit 1 if a live counter was deleted
    ok, limit, reset, retry = true, p.limit, 0, 0
    credit = 0
    if e.exists and (compat or (e.tag == algo and e.w0 > now)) then credit = 1 end
    if e.exists then ne = { exists = false, tag = -1, w0 = 0, a = 0, b = 0 } end
  elseif compat then
    ok, credit, limit, reset, retry, ne = compat_apply(p, op, n, e)
  else
    local st = ABSENT
    if e.exists and e.tag == algo then st = e end
    local f = APPLY[algo]
    if algo == 2 and p.refill > 0 then f = bucket_apply end
    ok, credit, limit, reset, retry, ne = f(p, op, n, now, st)
    if ne then
      ne = { exists = ne.w0 > 0, tag = algo, w0 = ne.w0, a = ne.a, b = ne.b }
    end
  end
  if ne then
    if group ~= '0' then undo[#undo + 1] = { key, e } end
    cache[key] = ne
  end

  local o = (i - 1) * 5
  out[o + 1] = ok and 1 or 0
  out[o + 2] = credit
  out[o + 3] = reset
  out[o + 4] = limit
  out[o + 5] = retry

  if group ~= '0' then
    group_ok = group_ok and ok
    if not group_ok and (i == nkeys or ARGV[base + 12 + NARGS] ~= group) then
      for j = #undo, 1, -1 do cache[undo[j][1]] = undo[j][2] end -- all or nothing
      undo = {}
    end
  end
end

-- write what changed, once per key
for _, key in ipairs(touched) do
  local e, o = cache[key], orig[key]
  if e ~= o then
    if not e.exists then
      if o.exists then redis.call('DEL', key) end
    elseif e.v ~= nil then -- compat
      if e.created then
        redis.call('SETEX', key, string.format('%.0f', e.ttl), string.format('%.0f', e.v))
      elseif e.v > o.v then
        redis.call('INCRBY', key, string.format('%.0f', e.v - o.v))
      elseif e.v < o.v then
        redis.call('DECRBY', key, string.format('%.0f', o.v - e.v))
      end
    elseif not (o.exists and o.tag == e.tag and o.w0 == e.w0 and o.a == e.a and o.b == e.b) then
      local v
      if e.tag == 1 then
        v = string.format('%d:%.0f:%.0f:%.0f', e.tag, e.w0, e.a, e.b)
      else
        v = string.format('%d:%.0f:%.0f', e.tag, e.w0, e.a)
      end
      redis.call('SET', key, v)
      redis.call('PEXPIREAT', key, string.format('%.0f', div_up(e.w0, 1000)))
    end
  end
end

return out
