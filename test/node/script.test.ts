import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import fc from "fast-check";
import type Redis from "ioredis";
import { beforeEach, describe, expect, it } from "vitest";
import { compact, LUA_PATH, MODULE_PATH, scriptModule } from "../../scripts/gen-script.ts";
import { blockLeft, toReply } from "../../src/script/limiter.ts";
import { SLIDING_WINDOW_SCRIPT, SLIDING_WINDOW_SHA1 } from "../../src/script/sliding-window.ts";
import { scriptRedis } from "../helpers/script-redis.ts";
import { type Call, type Reply, type RuleCall, SlidingWindowModel } from "../model/sliding-window.ts";

// The script as it ships, driven over RESP on a redis-server of this file's own, with the flag
// rewrite the shim applies for stock Redis (test/helpers/script-redis.ts).

describe("the shipped script", () => {
  it("is sliding-window.lua without its comments, named by its SHA1 (run `npm run gen:script` after editing the .lua)", () => {
    const lua = readFileSync(LUA_PATH, "utf8");
    expect(SLIDING_WINDOW_SCRIPT).toBe(compact(lua));
    expect(SLIDING_WINDOW_SHA1).toBe(createHash("sha1").update(SLIDING_WINDOW_SCRIPT).digest("hex"));
    expect(readFileSync(MODULE_PATH, "utf8")).toBe(scriptModule(lua));
    // every line of code is there, and nothing else
    const code = lua.split("\n").filter((l) => l.trim() !== "" && !l.trim().startsWith("--"));
    expect(SLIDING_WINDOW_SCRIPT.split("\n").filter((l) => l !== "")).toEqual(code.slice(0, 1).concat(code.slice(code.indexOf("]]") + 1)));
    expect(SLIDING_WINDOW_SCRIPT).not.toMatch(/--/);
  });

  it("refuses to compact a comment after code, which it cannot tell from a string", () => {
    expect(compact("#!lua\n--[[ a\n b ]]\n  -- c\nlocal a = 1\n\nreturn a\n")).toBe("#!lua\nlocal a = 1\nreturn a\n");
    expect(() => compact("#!lua\nlocal a = '--' -- c\n")).toThrow(/line 2: a comment after code/);
  });

  it("declares allow-key-locking on its first line, which Upstash reads", () => {
    expect(SLIDING_WINDOW_SCRIPT.split("\n")[0]).toBe("#!lua flags=allow-key-locking");
  });
});

// SLIDEGATE_MODEL_RUNS=5000 for a longer hunt; CI runs the default.
const RUNS = Number(process.env.SLIDEGATE_MODEL_RUNS ?? 300);
const T0 = 1_764_000_000_000_000; // µs
/** A rule as the tests below write it: named r0, r1, … by position. */
type Rule = Omit<RuleCall, "name">;

let redis: Redis;
let sha: string;
scriptRedis((r, s) => ([redis, sha] = [r, s]));
beforeEach(async () => {
  await redis.flushall();
});

/** One call as src/script/limiter.ts makes it: block, registry entry, logs; now, tier, fallback, then name, limit, window, cost, shadow per rule. */
const evalCall = (c: Omit<Call, "now"> & { now: number | "" }) =>
  redis.evalsha(
    sha,
    2 + c.logs.length,
    c.block,
    c.registry,
    ...c.logs,
    String(c.now),
    c.tier,
    c.fallback,
    ...c.rules.flatMap((r) => [r.name, r.limit, r.windowMs, r.cost, r.shadow ? 1 : 0]),
  ) as Promise<Reply>;
/** An address's call (the registry is not read), with every rule in tier "t". */
const evalsha = (block: string, logs: readonly string[], now: number | "", rules: readonly Omit<RuleCall, "name">[]) =>
  evalCall({ block, registry: `${block}:key`, logs, now, tier: "t", fallback: "-", rules: rules.map((r, i) => ({ name: `r${i}`, ...r })) });

/** Redis commands the script ran inside one call, from Redis's own accounting. */
async function commandsOf<T>(call: () => Promise<T>, own = 0): Promise<{ result: T; commands: number }> {
  await redis.config("RESETSTAT");
  const result = await call();
  const stats = (await redis.info("commandstats")).split("\n");
  let commands = -own;
  for (const line of stats) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (m && !["evalsha", "config|resetstat", "info", "multi", "exec"].includes(m[1]!)) commands += Number(m[2]);
  }
  return { result, commands };
}

/**
 * One call, and in the same transaction each of `logs` as the call left it: its type, its scores,
 * and the TTL the call left it, which is then taken off (PERSIST). Nothing runs out on Redis's
 * real clock between the call and these reads, however short the window and busy the machine.
 */
async function callAndRead(call: Call, logs: readonly string[]) {
  const tx = redis
    .multi()
    .evalsha(
      sha,
      2 + call.logs.length,
      call.block,
      call.registry,
      ...call.logs,
      String(call.now),
      call.tier,
      call.fallback,
      ...call.rules.flatMap((r) => [r.name, r.limit, r.windowMs, r.cost, r.shadow ? 1 : 0]),
    );
  for (const key of logs) tx.type(key).zrange(key, "0", "-1", "WITHSCORES").pttl(key).persist(key);
  // the reads above, which are not the script's
  const { result, commands } = await commandsOf(async () => (await tx.exec())!, 4 * logs.length);
  const [error, reply] = result[0]!;
  if (error) throw error;
  const states = logs.map((_, j) => {
    const [type, zrange, pttl] = result.slice(1 + 4 * j, 4 + 4 * j).map(([, v]) => v) as [string, string[] | undefined, number];
    return { type, scores: type === "zset" ? zrange!.filter((_, i) => i % 2 === 1).map(Number) : [], pttl };
  });
  return { result: reply as Reply, commands, states };
}

/**
 * The stated bound: the block read (+1 PTTL for a hand-made block), the registry read, at most
 * 7 calls per rule, and per rule that does not fit a rank and a binary search over its limit.
 */
const bound = (rules: readonly Omit<RuleCall, "name">[], reply: Reply) =>
  3 + 7 * rules.length + rules.reduce((sum, r, i) => sum + (reply[3 + 5 * i] !== 0 ? 2 + Math.ceil(Math.log2(Number(reply[4 + 5 * i] ?? r.limit) + 1)) : 0), 0);

describe("sliding-window script against its model", () => {
  const ruleArb = fc.record({
    limit: fc.oneof(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 7, max: 300 })),
    windowMs: fc.oneof(fc.integer({ min: 60_000, max: 600_000 }), fc.integer({ min: 1, max: 40 })),
    shadow: fc.constantFrom(false, false, true),
  });
  const TIERS = ["t1", "t2"] as const;
  const overrideValue = fc.oneof(
    fc.integer({ min: 1, max: 40 }).map(String), // limits
    fc.integer({ min: 60_000, max: 600_000 }).map(String), // windows, ms
    fc.integer({ min: 1, max: 40 }).map(String), // windows, ms
    fc.constantFrom("0", "x", "1e3", "5.5", " 7", "", "1000001", "31622400001", "1000000000000"), // no limit (1 to 1e6) or window (1 ms to 366 d) the admin API writes: no override
    // limits past 1000 per ms of a short window (a rule's or the key's own): no override of the rule
    fc.constantFrom("1001", "2000", "40001", "1000000"),
  );
  const step = fc.oneof(
    {
      weight: 12,
      arbitrary: fc.record({
        kind: fc.constant("decide" as const),
        who: fc.integer({ min: 0, max: 1 }),
        rules: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
        // a share of the rule's limit, so every cost is valid: 1..limit
        costs: fc.array(fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.double({ min: 0, max: 1, noNaN: true }) }), { minLength: 3, maxLength: 3 }),
        dt: fc.oneof(
          fc.constant(0),
          fc.integer({ min: 1, max: 5_000 }),
          fc.integer({ min: 0, max: 1_300_000_000 }),
          fc.integer({ min: -5_000, max: -1 }),
          fc.integer({ min: -1_300_000_000, max: -1 }),
          // exactly one rule's window: an entry then sits on the window's edge; back by one, the
          // newest entry stands a whole window ahead of the clock, the most a log the script
          // wrote can (any further and it starts afresh)
          fc.constantFrom("window 0", "window 1", "window 2", "-window 0", "-window 1", "-window 2"),
        ),
        tier: fc.constantFrom(...TIERS),
        // for identity 0, an API key: "" a key nobody knows, or its configured tier (identity 1
        // is an address: the registry is never read)
        fallback: fc.constantFrom("t1", "t2", ""),
      }),
    },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant("delete" as const), who: fc.integer({ min: 0, max: 1 }), key: fc.integer({ min: -2, max: 2 }) }) },
    // a key holding a value of another type (written by hand, or by another application on the same prefix)
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("clobber" as const),
        who: fc.integer({ min: 0, max: 1 }),
        key: fc.integer({ min: -2, max: 2 }),
        type: fc.constantFrom("string", "hash", "list", "zset"),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("block" as const),
        who: fc.integer({ min: 0, max: 1 }),
        forUs: fc.oneof(fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 1, max: 600_000_000 })),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant("register" as const),
        who: fc.integer({ min: 0, max: 1 }),
        // a tier written by hand that is no tier name is no tier field
        tier: fc.option(fc.constantFrom(...TIERS, ...TIERS, "", "x y", "t:1", "t".repeat(33)), { nil: undefined }),
        disabled: fc.constantFrom(undefined, undefined, undefined, "1", "0"),
        overrides: fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.constantFrom("limit", "window"), overrideValue), { maxLength: 3 }),
      }),
    },
  );

  // which log each of the three rules writes: its own, or one it shares with other rules
  const logsOf = fc.constantFrom([0, 1, 2], [0, 1, 2], [0, 0, 2], [0, 1, 1], [0, 1, 0], [0, 0, 0]);

  it(`decides as the model does over ${RUNS} command sequences, with logs shared by rules and keys deleted between calls`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(ruleArb, { minLength: 3, maxLength: 3 }), logsOf, fc.array(step, { minLength: 1, maxLength: 40, size: "max" }), async (defs, logOf, steps) => {
        await redis.flushall();
        const model = new SlidingWindowModel();
        const deadline = new Map<string, number>();
        const shortest = new Map<string, number>();
        const blockKey = (who: number) => `sg:{${who}}:block`;
        const registryKey = (who: number) => `sg:{${who}}:key`;
        const logKey = (who: number, tier: string, log: number) => `sg:{${who}}:${tier}:log${log}`;
        // rules sharing a log weigh a request alike: a share of the smallest limit among them
        const limitOf = (log: number) => Math.min(...defs.filter((_, i) => logOf[i] === log).map((d) => d.limit));
        let now = T0;
        for (const s of steps) {
          if (s.kind === "delete") {
            const keys = s.key === -1 ? [blockKey(s.who)] : s.key === -2 ? [registryKey(s.who)] : TIERS.map((t) => logKey(s.who, t, s.key));
            for (const key of keys) {
              await redis.del(key);
              model.delete(key);
              deadline.delete(key);
            }
          } else if (s.kind === "clobber") {
            // a log of another type starts afresh; a registry entry of another type is no entry;
            // a block of another type holds by its TTL (here none: it lasts)
            const keys = s.key === -1 ? [blockKey(s.who)] : s.key === -2 ? [registryKey(s.who)] : TIERS.map((t) => logKey(s.who, t, s.key));
            // a log holding a sorted set is still a sorted set: one this script cannot read
            const type = s.key >= 0 && s.type === "zset" ? "hash" : s.type;
            for (const key of keys) {
              await redis.del(key);
              if (type === "string") await redis.set(key, "x");
              else if (type === "hash") await redis.hset(key, "x", "1");
              else if (type === "list") await redis.rpush(key, "x");
              else await redis.zadd(key, 1, "x");
              model.delete(key);
              deadline.delete(key);
              if (s.key === -1) model.block(key, Number.POSITIVE_INFINITY);
            }
          } else if (s.kind === "block") {
            // as the admin API writes it: when the block ends, on the script's clock
            await redis.set(blockKey(s.who), String(now + s.forUs), "PX", 3_600_000);
            model.block(blockKey(s.who), now + s.forUs);
          } else if (s.kind === "register") {
            const fields: Record<string, string> = {};
            if (s.tier !== undefined) fields.tier = s.tier;
            if (s.disabled) fields.disabled = s.disabled;
            for (const [rule, what, value] of s.overrides) fields[`${what}:r${rule}`] = value;
            await redis.del(registryKey(s.who));
            if (Object.keys(fields).length) await redis.hset(registryKey(s.who), fields);
            model.delete(registryKey(s.who));
            if (Object.keys(fields).length) model.register(registryKey(s.who), fields);
          } else {
            now += typeof s.dt === "number" ? s.dt : (s.dt.startsWith("-") ? -1 : 1) * defs[Number(s.dt.slice(-1))]!.windowMs * 1000;
            // rules that share a log see the same requests: one is chosen, all of them are
            const picked = [0, 1, 2].filter((i) => s.rules[i]);
            if (picked.length === 0) picked.push(0);
            const chosen = [0, 1, 2].filter((i) => picked.some((p) => logOf[p] === logOf[i]));
            const rules = chosen.map((i): RuleCall => {
              const log = logOf[i]!;
              // a shared log is for enforced rules only: its rules are never shadows
              const shadow = defs[i]!.shadow && logOf.filter((l) => l === log).length === 1;
              return { ...defs[i]!, name: `r${i}`, shadow, cost: 1 + Math.floor(s.costs[log]! * (limitOf(log) - 1)) };
            });
            const call: Call = {
              block: blockKey(s.who),
              registry: registryKey(s.who),
              logs: chosen.map((i) => logKey(s.who, s.tier, logOf[i]!)),
              now,
              tier: s.tier,
              fallback: s.who === 0 ? s.fallback : "-",
              rules,
            };
            // No key runs out on Redis's real clock: every TTL a call sets is read, turned into a
            // deadline on this test's clock and PERSISTed. A log whose deadline this clock has
            // reached expires now, in Redis and in the model alike.
            for (const key of new Set(call.logs)) {
              const ends = deadline.get(key);
              if (ends !== undefined && now >= ends) {
                await redis.del(key);
                model.delete(key);
                deadline.delete(key);
              }
            }
            const newestOf = (key: string) => model.inWindow(key, now, Number.MAX_SAFE_INTEGER).at(-1)?.at;
            const before = call.logs.map(newestOf);
            const expected = model.decide(call);
            const logs = [...new Set(call.logs)];
            const { result, commands, states } = await callAndRead(call, logs);
            expect(result).toEqual(expected);
            expect(commands).toBeLessThanOrEqual(bound(rules, result));
            // the gate reads every answer the script gives: its reader refuses only what no script answers
            expect(() => toReply(result, rules, call.fallback === "-" ? undefined : { fallback: call.fallback })).not.toThrow();
            // every log of the call holds exactly the model's entries (the script deleted nothing
            // it should not have), and a TTL the call set is turned into a deadline
            const refreshed = new Set<string>();
            for (const [j, key] of logs.entries()) {
              const want = model.inWindow(key, -Infinity, Number.MAX_SAFE_INTEGER).map((e) => e.at);
              const { type, scores, pttl } = states[j]!;
              // a value of another type that the call did not reach (it ended before the logs) is no log
              if (type !== "zset" && type !== "none") {
                expect({ key, want }).toEqual({ key, want: [] });
                continue;
              }
              expect({ key, scores }).toEqual({ key, scores: want });
              // the TTL the call set, read in the same transaction (to the millisecond: + 1 ms)
              if (pttl === -2) deadline.delete(key);
              else if (pttl >= 0) {
                deadline.set(key, now + (pttl + 1) * 1000);
                shortest.set(key, now + pttl * 1000);
                refreshed.add(key);
              }
              // a log with entries always has a deadline: its first write set one
              if (want.length) expect(deadline.has(key), `${key} has entries and no TTL`).toBe(true);
            }
            // a log written to lives, on the caller's clock, a window past its newest entry, for
            // the longest window of any rule on it: the one deciding (a key's own) and the
            // configured one; and not much longer (a window and an eighth of it, + 5 ms)
            for (const [j, key] of call.logs.entries()) {
              const newest = model.inWindow(key, -Infinity, Number.MAX_SAFE_INTEGER).at(-1);
              const written = newestOf(key) !== before[j];
              if (!newest || !written) continue;
              const need = Math.max(...call.logs.flatMap((k, i) => (k === key ? [Number(result[5 + 5 * i]), rules[i]!.windowMs] : []))) * 1000;
              const ends = deadline.get(key)!;
              expect(ends, `${key}: deadline ${ends} < newest ${newest.at} + ${need}`).toBeGreaterThanOrEqual(newest.at + need);
              if (refreshed.has(key)) expect(shortest.get(key)! - now).toBeLessThanOrEqual(Math.max(newest.at - now, 0) + need + need / 8 + 5000);
            }
            if (result[0] === 1 && result.length > 2) {
              // every log written to lives at least a window past its newest entry (a log the
              // call did not write keeps its TTL: a clock stepping back can outrun that one)
              for (const [j, key] of call.logs.entries()) {
                const windowMs = Number(result[5 + 5 * j]);
                const newest = model.inWindow(key, now, windowMs).at(-1);
                // arrivals strictly increase: a log was written to when its newest entry moved
                const written = newestOf(key) !== before[j];
                if (!newest || !written) continue;
                expect(deadline.get(key)! - now).toBeGreaterThanOrEqual(newest.at + windowMs * 1000 - now - 2000);
              }
            }
          }
        }
      }),
      { numRuns: RUNS },
    );
  }, 600_000);
});

describe("sliding-window script on state it did not write", () => {
  const rule = (limit: number, cost = 1): Rule => ({ limit, windowMs: 60_000, cost, shadow: false });

  it("answers at once when a weight key of an older version survives its log, and Redis stays up", async () => {
    // The state that once looped forever: a weight with no log behind it.
    await redis.set("w:{z}", "5", "PX", 60_000);
    await redis.set("l:{z}:w", "5", "PX", 60_000);
    const { result, commands } = await commandsOf(() => evalsha("b:{z}", ["l:{z}"], T0, [rule(5, 1)]));
    expect(result).toEqual([1, 4, 60_000, 0, 5, 60_000]);
    expect(commands).toBeLessThanOrEqual(8);
    expect(await redis.ping()).toBe("PONG");
  });

  it("starts a window afresh from a log of an older version instead of misreading it", async () => {
    // members of the older layout: random request ids, "<cost>.<id>" when weighted
    await redis.zadd("l:{y}", T0 - 2000, "AbC-12_x", T0 - 1000, "3.Zq9_k-Pe");
    expect(await evalsha("b:{y}", ["l:{y}"], T0, [rule(5, 2)])).toEqual([1, 3, 60_000, 0, 5, 60_000]);
    expect(await redis.zrange("l:{y}", "0", "-1")).toEqual(["0:2"]);
    expect(await redis.ping()).toBe("PONG");
  });

  it("starts afresh from a log key of another type, and reads a registry entry of another type as no entry, never an error", async () => {
    await redis.set("l:{v}", "not a log");
    await redis.rpush("l:{v}:key", "tier", "gold");
    const reply = await evalCall({ block: "b:{v}", registry: "l:{v}:key", logs: ["l:{v}"], now: T0, tier: "t", fallback: "t", rules: [{ name: "r0", ...rule(5, 2) }] });
    expect(reply).toEqual([1, 3, 60_000, 0, 5, 60_000]);
    expect(await redis.zrange("l:{v}", "0", "-1")).toEqual(["0:2"]);
    // the registry's value is the operator's to repair: left as it was
    expect(await redis.lrange("l:{v}:key", "0", "-1")).toEqual(["tier", "gold"]);
  });

  it("drops a log it starts afresh with UNLINK, which frees a large one outside the script, never with DEL, which frees it inside", async () => {
    // 50,000 entries of a log this script did not write (totals out of order at the newest):
    // freed inside the script, they would hold Redis for every tenant as long as that takes
    for (let i = 0; i < 50_000; i += 10_000) {
      await redis.zadd("l:{big}", ...Array.from({ length: 10_000 }, (_, j) => [T0 - 50_000 + i + j, String(100 + i + j)]).flat());
    }
    await redis.zadd("l:{big}", T0, "3");
    await redis.config("RESETSTAT");
    expect(await evalsha("b:{big}", ["l:{big}"], T0, [rule(5)])).toEqual([1, 4, 60_000, 0, 5, 60_000]);
    const drops = (await redis.info("commandstats")).split("\n").flatMap((line) => /^cmdstat_(del|unlink):calls=(\d+)/.exec(line)?.slice(1) ?? []);
    expect(drops).toEqual(["unlink", "1"]);
    expect(await redis.zcard("l:{big}")).toBe(1);
  });

  it("drops a large log whose every entry has left the window with UNLINK, rather than removing its entries one by one inside the call", async () => {
    // A caller who spent a limit of 1,000,000 in a burst and comes back after the window, in the
    // eighth of a window before the log's TTL collects it: removed entry by entry, its 300,000
    // entries held Redis for every tenant for some 130 ms (1,000,000: 440 ms) inside one call
    const limit: Rule = { limit: 1_000_000, windowMs: 1_000_000, cost: 1, shadow: false };
    for (let i = 0; i < 300_000; i += 50_000) {
      await redis.zadd("l:{gone}", ...Array.from({ length: 50_000 }, (_, j) => [T0 + i + j, String(i + j)]).flat());
    }
    const later = T0 + 300_000 + 1_000_000_000;
    await redis.config("RESETSTAT");
    expect(await evalsha("b:{gone}", ["l:{gone}"], later, [limit])).toEqual([1, 999_999, 1_000_000, 0, 1_000_000, 1_000_000]);
    const stats = Object.fromEntries(
      (await redis.info("commandstats")).split("\n").flatMap((line) => {
        const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
        return m ? [[m[1]!, { calls: Number(m[2]), usec: Number(m[3]) }]] : [];
      }),
    );
    expect({ unlink: stats.unlink?.calls, zremrangebyscore: stats.zremrangebyscore?.calls }).toEqual({ unlink: 1, zremrangebyscore: undefined });
    expect(await redis.zrange("l:{gone}", "0", "-1", "WITHSCORES")).toEqual(["0", String(later)]);
  });

  it("starts afresh when running totals are out of order, and when the newest entry is more than a window ahead", async () => {
    await redis.zadd("l:{x}", T0 - 2000, "7", T0 - 1000, "3");
    expect(await evalsha("b:{x}", ["l:{x}"], T0, [rule(5)])).toEqual([1, 4, 60_000, 0, 5, 60_000]);
    await redis.zadd("l:{v}", T0 + 61_000_000, "0");
    expect(await evalsha("b:{v}", ["l:{v}"], T0, [rule(5)])).toEqual([1, 4, 60_000, 0, 5, 60_000]);
  });

  // with a fourth rule on a log of its own, the call takes the general path
  it.each([
    ["", []],
    [" (and a rule on a log of its own beside them)", ["l:{u}:own"]],
  ])("starts a shared log afresh for every rule on it when a shorter rule's window begins at an entry it cannot read%s", async (_, own) => {
    // rules of 4 s, 2 s and 1 s on one log: the first two read their oldest entries (3 and 2
    // used), the third finds an entry no slidegate wrote; none of the three may keep counting
    // a log that is gone
    await redis.zadd("l:{u}", T0 - 3_000_000, "0", T0 - 1_500_000, "1", T0 - 500_000, "not ours", T0 - 100_000, "2");
    const windows = [4000, 2000, 1000, ...own.map(() => 500)];
    const logs = [...windows.slice(0, 3).map(() => "l:{u}"), ...own];
    const reply = await evalsha(
      "b:{u}",
      logs,
      T0,
      windows.map((windowMs) => ({ limit: 10, windowMs, cost: 1, shadow: false })),
    );
    expect(reply).toEqual([1, ...windows.flatMap((w) => [9, w, 0, 10, w])]);
    expect(await redis.zrange("l:{u}", "0", "-1")).toEqual(["0"]);
  });

  it("starts afresh when the oldest entry's total is the newest's total after it (out of order, at the boundary)", async () => {
    await redis.zadd("l:{t}", T0 - 2000, "6", T0 - 1000, "5");
    expect(await evalsha("b:{t}", ["l:{t}"], T0, [rule(5)])).toEqual([1, 4, 60_000, 0, 5, 60_000]);
    expect(await redis.zrange("l:{t}", "0", "-1")).toEqual(["0"]);
  });

  it("finds a weighted wait by binary search in a large log, not by a walk through it", async () => {
    // 100,000 entries of cost 3 over 10 s; a request of cost 250,000 against a limit of 300,000
    // must wait until entries holding 250,000 units have left: the 83,334th oldest entry
    for (let i = 0; i < 100_000; i += 10_000) {
      const chunk: (string | number)[] = [];
      for (let j = i; j < i + 10_000; j++) chunk.push(T0 - 50_000_000 + j * 100, `${3 * j}:3`);
      await redis.zadd("l:{big}", ...chunk);
    }
    const rules: Rule[] = [{ limit: 300_000, windowMs: 60_000, cost: 250_000, shadow: false }];
    const { result, commands } = await commandsOf(() => evalsha("b:{big}", ["l:{big}"], T0, rules));
    // that entry arrived at T0 - 50 s + 8.3333 s: it leaves the window 18.3333 s from now
    expect(result).toEqual([0, 0, 10_000, 18_334, 300_000, 60_000]);
    expect(commands).toBeLessThanOrEqual(bound(rules, result));
    expect(commands).toBeLessThan(30);
  });

  it("searches a weighted wait in at most 22 reads on a log it wrote under a limit of 1,000,000, and in at most 46 on any log", async () => {
    /** The reads of the wait's search (ZRANK and the ZRANGEs past the newest and oldest entry's). */
    const searchReads = async (log: string, rule: Rule) => {
      await redis.config("RESETSTAT");
      const reply = await evalsha("b:{s}", [log], T0, [rule]);
      const stats = await redis.info("commandstats");
      const calls = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
      return { reply, reads: calls("zrank") + calls("zrange") - 2 };
    };
    // the longest wait a gate's log holds: 1,000,000 units, 999,999 of them in the newest entry
    await redis.zadd("l:{s}", T0 - 2_000_000, "0", T0 - 1_000_000, "1:999999");
    const gate = await searchReads("l:{s}", { limit: 1_000_000, windowMs: 60_000, cost: 1_000_000, shadow: false });
    expect(gate).toEqual({ reply: [0, 0, 58_000, 59_000, 1_000_000, 60_000], reads: 21 });
    expect(gate.reads).toBeLessThanOrEqual(22);
    // totals written by hand, just short of the 1e13 units past which no search is made
    await redis.zadd("l:{s}:hand", T0 - 2_000_000, "0:9999999999998", T0 - 1_000_000, "9999999999998");
    const hand = await searchReads("l:{s}:hand", { limit: 5, windowMs: 60_000, cost: 5, shadow: false });
    expect(hand.reply).toEqual([0, 0, 58_000, 59_000, 5, 60_000]);
    // the limit does not bound a wait on totals no slidegate wrote: 2 + ceil(log2(1e13)), not 22
    expect(hand.reads).toBeGreaterThan(22);
    expect(hand.reads).toBeLessThanOrEqual(46);
  });

  it("makes a heavier request wait for exactly as many of the oldest entries as it needs", async () => {
    const rule = (cost: number): Rule => ({ limit: 5, windowMs: 60_000, cost, shadow: false });
    for (let i = 0; i < 5; i++) await evalsha("b:{u}", ["l:{u}"], T0 + i * 1_000_000, [rule(1)]);
    // full; a request of 3 fits once the 3 oldest (at +0, +1, +2 s) have left
    expect(await evalsha("b:{u}", ["l:{u}"], T0 + 10_000_000, [rule(3)])).toEqual([0, 0, 50_000, 52_000, 5, 60_000]);
    expect(await evalsha("b:{u}", ["l:{u}"], T0 + 10_000_000, [rule(1)])).toEqual([0, 0, 50_000, 50_000, 5, 60_000]);
  });

  it("lets an entry leave the window exactly one window after it arrived", async () => {
    const rule: Rule = { limit: 1, windowMs: 60_000, cost: 1, shadow: false };
    expect(await evalsha("b:{e}", ["l:{e}"], T0, [rule])).toEqual([1, 0, 60_000, 0, 1, 60_000]);
    expect(await evalsha("b:{e}", ["l:{e}"], T0 + 59_999_999, [rule])).toEqual([0, 0, 1, 1, 1, 60_000]);
    expect(await evalsha("b:{e}", ["l:{e}"], T0 + 60_000_000, [rule])).toEqual([1, 0, 60_000, 0, 1, 60_000]);
  });

  it("reads the window from the log's newest entry when the clock asking is behind it", async () => {
    // Edge clocks tick in milliseconds: a burst within one millisecond is recorded 1 µs apart,
    // so the newest entry can stand ahead of the clock that reads it next.
    const rule: Rule = { limit: 10, windowMs: 60_000, cost: 1, shadow: false };
    await evalsha("b:{n}", ["l:{n}"], T0, [rule]);
    const burst = T0 + 59_999_999;
    for (let i = 0; i < 3; i++) await evalsha("b:{n}", ["l:{n}"], burst, [rule]);
    // the entry at T0 has not been evicted by this clock, but the newest (burst + 2 µs) puts
    // it out of the window: 3 in the window, not 4
    expect(await redis.zcard("l:{n}")).toBe(4);
    expect(await evalsha("b:{n}", ["l:{n}"], burst, [{ ...rule, cost: 7 }])).toEqual([1, 0, 60_000, 0, 10, 60_000]);
  });

  it("refuses rules that share a log but weigh a request differently, or a shadow rule on a shared log, before writing anything", async () => {
    await redis.zadd("l:{s}", T0 - 90_000_000, "0");
    await expect(evalsha("b:{s}", ["l:{s}", "l:{s}"], T0, [rule(5, 1), rule(5, 2)])).rejects.toThrow(/shares a log with a rule of another cost/);
    const shadow: Rule = { ...rule(5), shadow: true };
    await expect(evalsha("b:{s}", ["l:{s}", "l:{s}"], T0, [rule(5), shadow])).rejects.toThrow(/shares a log with a shadow rule/);
    await expect(evalsha("b:{s}", ["l:{s}", "l:{s}"], T0, [shadow, rule(5)])).rejects.toThrow(/shares a log with a shadow rule/);
    // not even the eviction of what left the window ran
    expect(await redis.zcard("l:{s}")).toBe(1);
  });

  it("starts a shared log afresh for every rule on it when a shorter rule's oldest entry is not one it wrote", async () => {
    // the hour's oldest entry reads well; the second's (the entry 500 ms ago) does not
    await redis.zadd("l:{m}", T0 - 50_000_000, "0", T0 - 500_000, "x", T0 - 100_000, "5");
    const second: Rule = { limit: 3, windowMs: 1000, cost: 1, shadow: false };
    const hour: Rule = { limit: 10, windowMs: 3_600_000, cost: 1, shadow: false };
    expect(await evalsha("b:{m}", ["l:{m}", "l:{m}"], T0, [hour, second])).toEqual([1, 9, 3_600_000, 0, 10, 3_600_000, 2, 1000, 0, 3, 1000]);
    expect(await redis.zrange("l:{m}", "0", "-1")).toEqual(["0"]);
  });

  it("answers a key's call with no rule as admitted, with no rule in its reply", async () => {
    // the registry alone is asked about (no rule of the key's tier covers the request)
    await redis.hset("b:{r}:key", { tier: "t" });
    expect(await evalCall({ block: "b:{r}", registry: "b:{r}:key", logs: [], now: T0, tier: "t", fallback: "t", rules: [] })).toEqual([1]);
    expect(await evalCall({ block: "b:{r}", registry: "b:{r}:key", logs: [], now: T0, tier: "u", fallback: "t", rules: [] })).toEqual([5, "t"]);
  });

  it("refuses a cost that is not a whole number from 1, before writing anything", async () => {
    for (const cost of [0, -1, 1.5, Number.NaN]) {
      await expect(evalsha("b:{c}", ["l:{c}"], T0, [rule(5, cost)])).rejects.toThrow(/whole cost >= 1/);
    }
    expect(await redis.exists("l:{c}")).toBe(0);
  });

  it("refuses an edge clock that is no whole number of microseconds from 0 to 2^52, before writing anything", async () => {
    // past 2^53 a log's scores stop being distinct integers: two entries would share one
    for (const now of [1.5, -1, 2 ** 52, 2 ** 53, 1e300, Number.POSITIVE_INFINITY, Number.NaN]) {
      await expect(evalsha("b:{n}", ["l:{n}"], now, [rule(5, 1)])).rejects.toThrow(/now must be whole microseconds from 0 to 2\^52/);
    }
    expect(await redis.exists("l:{n}")).toBe(0);
    expect(await evalsha("b:{n}", ["l:{n}"], 2 ** 52 - 1, [rule(5, 1)])).toEqual([1, 4, 60_000, 0, 5, 60_000]);
  });

  it("refuses an infinite or absurd window, its own or a key's override of it, before writing anything", async () => {
    for (const windowMs of [Number.POSITIVE_INFINITY, 1e13, Number.NaN]) {
      await expect(evalsha("b:{w}", ["l:{w}"], T0, [{ limit: 5, windowMs, cost: 1, shadow: false }])).rejects.toThrow(/window from 1 ms to 1e12 ms/);
    }
    expect(await redis.exists("l:{w}")).toBe(0);
    // a key's override past the bound, written by hand, is no override: the configured window decides
    await redis.hset("reg:{w}", { "window:r0": "10000000000000" });
    const call = { block: "b:{w}", registry: "reg:{w}", logs: ["l:{w}"], now: T0, tier: "t", fallback: "t" };
    expect(await evalCall({ ...call, rules: [{ name: "r0", limit: 5, windowMs: 60_000, cost: 1, shadow: false }] })).toEqual([1, 4, 60_000, 0, 5, 60_000]);
    expect(await redis.pttl("l:{w}")).toBeGreaterThan(60_000);
  });

  it("refuses a rule whose limit is more than 1000 per millisecond of its window, which entries a microsecond apart cannot count, before writing anything", async () => {
    const dense: Rule = { limit: 2000, windowMs: 1, cost: 1, shadow: false };
    await expect(evalsha("b:{d}", ["l:{d}"], T0, [dense])).rejects.toThrow(/rule 1 needs a limit from 1 to 1000 per ms of its window/);
    // and on the general path (rules on logs of their own)
    await expect(evalsha("b:{d}", ["l:{d}", "l:{d}:2"], T0, [rule(5), dense])).rejects.toThrow(/rule 2 needs a limit from 1 to 1000 per ms of its window/);
    // and a later rule of a shared log (the one-log path), as the general path refuses it
    await expect(evalsha("b:{d}", ["l:{d}", "l:{d}"], T0, [rule(5), dense])).rejects.toThrow(/rule 2 needs a limit from 1 to 1000 per ms of its window/);
    expect(await redis.exists("l:{d}", "l:{d}:2")).toBe(0);
    expect(await evalsha("b:{d}", ["l:{d}"], T0, [{ ...dense, limit: 1000 }])).toEqual([1, 999, 1, 0, 1000, 1]);
  });
});

describe("operator blocks in the script", () => {
  const rules: Rule[] = [{ limit: 5, windowMs: 60_000, cost: 1, shadow: false }];

  it("holds until its last microsecond, then lets the identity through", async () => {
    const ends = T0 + 5_000_000;
    await redis.set("b:{k}", String(ends), "PX", 10_000);
    expect(await evalsha("b:{k}", ["l:{k}"], ends - 5_000_000, rules)).toEqual([2, 5000]);
    expect(await evalsha("b:{k}", ["l:{k}"], ends - 1001, rules)).toEqual([2, 2]);
    // the last millisecond still blocks, and says so: never a block of 0 ms
    expect(await evalsha("b:{k}", ["l:{k}"], ends - 1000, rules)).toEqual([2, 1]);
    expect(await evalsha("b:{k}", ["l:{k}"], ends - 1, rules)).toEqual([2, 1]);
    expect(await redis.exists("l:{k}")).toBe(0);
    expect(await evalsha("b:{k}", ["l:{k}"], ends, rules)).toEqual([1, 4, 60_000, 0, 5, 60_000]);
  });

  it("reads a value of another type at the block key as a block by its TTL, never an error", async () => {
    await redis.hset("b:{t}", "until", "tomorrow");
    await redis.pexpire("b:{t}", 30_000);
    const [kind, ms] = await evalsha("b:{t}", ["l:{t}"], T0, rules);
    expect(kind).toBe(2);
    expect(ms).toBeGreaterThan(29_000);
    expect(await redis.exists("l:{t}")).toBe(0);
  });

  it("reads a block set by hand (any value) by its TTL, and one without TTL as lasting", async () => {
    await redis.set("b:{h}", "yes", "PX", 30_000);
    const [kind, ms] = await evalsha("b:{h}", ["l:{h}"], T0, rules);
    expect(kind).toBe(2);
    expect(ms).toBeGreaterThan(29_000);
    expect(ms).toBeLessThanOrEqual(30_000);
    await redis.set("b:{h}", "yes");
    expect(await evalsha("b:{h}", ["l:{h}"], T0, rules)).toEqual([2, -1]);
  });

  /** A block of `value` set by hand for 30 s holds by that TTL, in the script and in blockLeft alike. */
  async function expectHeldByTtl(tag: string, value: string) {
    await redis.set(`b:{${tag}}`, value, "PX", 30_000);
    const [kind, ms] = await evalsha(`b:{${tag}}`, [`l:{${tag}}`], T0, rules);
    expect({ value, kind }).toEqual({ value, kind: 2 });
    expect(ms, value).toBeGreaterThan(29_000);
    expect(ms, value).toBeLessThanOrEqual(30_000);
    expect(blockLeft(value, 30_000, T0), value).toBe(30_000);
  }

  it("reads a block set by hand whose value is no finite time (nan, inf, -inf) by its TTL, as blockLeft does", async () => {
    // Lua's tonumber takes these (C's strtod does) where the admin API never writes them: as
    // times, nan and -inf would be no block at all, and inf one that Redis's integer cast wraps
    for (const value of ["nan", "-nan", "inf", "-inf", "Infinity", "-Infinity", "1e400"]) {
      await expectHeldByTtl("f", value);
      await redis.set("b:{f}", value);
      expect(await evalsha("b:{f}", ["l:{f}"], T0, rules), value).toEqual([2, -1]);
    }
    expect(await redis.exists("l:{f}")).toBe(0);
  });

  it("reads a block's value as its end only in the digits the admin API writes, and any other by its TTL, as blockLeft does", async () => {
    // Lua's tonumber and JavaScript's Number each take spellings the other refuses (hex floats,
    // a signed hex, 0b and 0o, Unicode spaces): read so, the gate's decisions and the admin API's
    // usage (or the refusals read while the store takes no writes) would disagree on one block
    const ends = T0 + 5_000_000;
    const values = ["0x1p60", "-0x10", "0X1P4", "0x1.8p1", "0b11", "0o7", "\u00a05", "\u20285", " 5", "+5", "-5", "5.5", "1e3", "0x10"];
    for (const value of [...values, ` ${ends}`, `${ends / 1e15}e15`, `0x${ends.toString(16)}`]) {
      await expectHeldByTtl("p", value);
    }
    expect(await redis.exists("l:{p}")).toBe(0);
    for (const value of [String(ends), `000${ends}`]) {
      await redis.set("b:{p}", value, "PX", 30_000);
      expect(await evalsha("b:{p}", ["l:{p}"], T0, rules), value).toEqual([2, 5000]);
      expect(blockLeft(value, 30_000, T0), value).toBe(5000);
    }
  });
});

describe("sliding-window script on Redis's clock", () => {
  const redisNowUs = async () => {
    const [seconds, micros] = (await redis.time()).map(Number) as [number, number];
    return seconds * 1e6 + micros;
  };

  it("takes now from Redis TIME when none is given", async () => {
    const rules: Rule[] = [{ limit: 2, windowMs: 60_000, cost: 1, shadow: false }];
    const before = await redisNowUs();
    expect(await evalsha("b:{t}", ["l:{t}"], "", rules)).toEqual([1, 1, 60_000, 0, 2, 60_000]);
    const after = await redisNowUs();
    const [, at] = await redis.zrange("l:{t}", "0", "0", "WITHSCORES");
    // recorded at Redis's time to the microsecond: between the two readings of it
    expect(Number(at)).toBeGreaterThanOrEqual(before);
    expect(Number(at)).toBeLessThanOrEqual(after);
  });

  // TTLs run on Redis's real clock, so these two take real time (a window of 400 ms): the
  // pauses only ever make the checks easier to pass for a script that refreshes, never harder.
  it("refreshes a log's TTL when a write starts a new eighth of its window, so the log outlives its newest entry", async () => {
    const rules: Rule[] = [{ limit: 1000, windowMs: 400, cost: 1, shadow: false }];
    await evalsha("b:{ttl}", ["l:{ttl}"], "", rules);
    await new Promise((r) => setTimeout(r, 120)); // past at least two eighths (50 ms each)
    const before = Math.floor((await redisNowUs()) / 1000);
    await evalsha("b:{ttl}", ["l:{ttl}"], "", rules);
    // without the refresh the log would go 450 ms after the first write: before + 330 ms at most
    expect(Number(await redis.call("PEXPIRETIME", "l:{ttl}"))).toBeGreaterThanOrEqual(before + 400);
  });

  it("sets a log's TTL a window and an eighth past the entry, covering later writes in the same eighth", async () => {
    const rules: Rule[] = [{ limit: 1000, windowMs: 80_000, cost: 1, shadow: false }];
    await evalsha("b:{ttl8}", ["l:{ttl8}"], T0, rules);
    // the eighth's 10 s on top of the window's 80 s: a write later in this eighth adds none
    expect(await redis.pttl("l:{ttl8}")).toBeGreaterThan(89_000);
    await evalsha("b:{ttl8}", ["l:{ttl8}"], T0 + 9_000_000, rules);
    expect(await redis.pttl("l:{ttl8}")).toBeGreaterThan(80_000);
  });
});

describe("the key registry, read in the same call", () => {
  const rules: RuleCall[] = [{ name: "minute", limit: 5, windowMs: 60_000, cost: 1, shadow: false }];
  const keyCall = (tier: string, fallback: string) => evalCall({ block: "b:{r}", registry: "reg:{r}", logs: [`l:{r}:${tier}`], now: T0, tier, fallback, rules });

  it("decides a key's call over 3,000 rules, the most a list of rules holds (RATE_LIMITS), registry read and all", async () => {
    const many = Array.from({ length: 3000 }, (_, i) => ({ name: `r${i}`, limit: 5, windowMs: 60_000, cost: 1, shadow: false }));
    await redis.hset("reg:{r}", { tier: "paid", "limit:r2999": "7" });
    const reply = await evalCall({ block: "b:{r}", registry: "reg:{r}", logs: many.map((_, i) => `l:{r}:${i}`), now: T0, tier: "paid", fallback: "free", rules: many });
    expect(reply.length).toBe(1 + 5 * 3000);
    expect(reply.slice(0, 6)).toEqual([1, 4, 60_000, 0, 5, 60_000]);
    expect(reply.slice(-5)).toEqual([6, 60_000, 0, 7, 60_000]);
  });

  it("answers an unknown key without recording anything, and a configured key by its tier", async () => {
    const { result, commands } = await commandsOf(() => keyCall("free", ""));
    expect(result).toEqual([3]);
    expect(commands).toBe(2); // the block and the registry, nothing else
    expect(await keyCall("free", "free")).toEqual([1, 4, 60_000, 0, 5, 60_000]);
  });

  it("puts the registry's tier before the configured one, and says so when it was not the tier asked about", async () => {
    await redis.hset("reg:{r}", { tier: "paid" });
    expect(await keyCall("free", "free")).toEqual([5, "paid"]);
    expect(await redis.exists("l:{r}:free")).toBe(0);
    expect(await keyCall("paid", "free")).toEqual([1, 4, 60_000, 0, 5, 60_000]);
  });

  it("reads an entry written by an earlier version, which kept the key's hash beside its tier, by its tier", async () => {
    // all-digit, the one spelling of a hash the override check could take for a number
    await redis.hset("reg:{r}", { hash: "1".repeat(64), tier: "paid" });
    expect(await keyCall("paid", "free")).toEqual([1, 4, 60_000, 0, 5, 60_000]);
  });

  it("reads of a key's registry entry only the fields its call uses, so an entry holding many more costs a decision no more", async () => {
    // fields a hand or another application on the same prefix wrote: read whole, every decision
    // of the key would copy them all (a call each, but of work growing with the entry)
    for (let i = 0; i < 20_000; i += 5_000) {
      await redis.hset("reg:{r}", Object.fromEntries(Array.from({ length: 5_000 }, (_, j) => [`note:${i + j}`, "1"])));
    }
    await redis.hset("reg:{r}", { tier: "paid", "limit:minute": "7", "window:other": "1000" });
    await redis.config("RESETSTAT");
    expect(await keyCall("paid", "free")).toEqual([1, 6, 60_000, 0, 7, 60_000]);
    const reads = (await redis.info("commandstats")).split("\n").flatMap((line) => /^cmdstat_(hgetall|hmget|hget|hscan):calls=(\d+)/.exec(line)?.slice(1) ?? []);
    expect(reads).toEqual(["hmget", "1"]);
    await redis.hset("reg:{r}", { disabled: "1" });
    expect(await keyCall("paid", "free")).toEqual([4]);
  });

  it("refuses a disabled key, and applies one key's own limit and window", async () => {
    await redis.hset("reg:{r}", { tier: "paid", "limit:minute": "100", "window:minute": "3600000" });
    expect(await keyCall("paid", "free")).toEqual([1, 99, 3_600_000, 0, 100, 3_600_000]);
    await redis.hset("reg:{r}", { disabled: "1" });
    expect(await keyCall("paid", "free")).toEqual([4]);
  });

  it("keeps a log written under a key's own shorter window for the configured window too, so the entries count once the override goes", async () => {
    await redis.hset("reg:{r}", { tier: "paid", "window:minute": "1" });
    expect(await keyCall("paid", "free")).toEqual([1, 4, 1, 0, 5, 1]);
    // the override goes: the configured minute counts the entry just written
    await redis.del("reg:{r}");
    const later = await evalCall({ block: "b:{r}", registry: "reg:{r}", logs: ["l:{r}:paid"], now: T0 + 1, tier: "paid", fallback: "paid", rules });
    expect(later).toEqual([1, 3, 60_000, 0, 5, 60_000]);
    // a minute and an eighth of it (7.5 s): later writes in this eighth, which do not refresh it, stay covered
    expect(await redis.pttl("l:{r}:paid")).toBeGreaterThan(67_000);
  });

  it("reads a key's own limit and window that would count more than 1000 per millisecond of the window as no override of that rule: a burst at one clock reading stops at the rule's limit", async () => {
    // Entries stand at least 1 µs apart, so a burst at one clock reading runs a µs ahead of the
    // clock per entry: 2,000 in 1 ms would run more than a window ahead, where the log is taken
    // for one the script did not write and starts afresh, again and again.
    await redis.hset("reg:{r}", { tier: "paid", "limit:burst": "2000" });
    const burst = (limit: number, windowMs: number) =>
      redis
        .multi()
        .evalsha(sha, 3, "b:{r}", "reg:{r}", "l:{r}:paid", String(T0), "paid", "free", "burst", limit, windowMs, 1, 0)
        // nothing runs out on Redis's real clock (the log's TTL is a few ms)
        .persist("l:{r}:paid")
        .exec();
    const replies: Reply[] = [];
    for (let i = 0; i < 2100; i++) {
      const [[error, reply]] = (await burst(5, 1))! as [[Error | null, Reply]];
      if (error) throw error;
      replies.push(reply);
    }
    expect(replies[0]).toEqual([1, 4, 1, 0, 5, 1]);
    expect(replies.filter((r) => r[0] === 1)).toHaveLength(5);
    // a key's own window alone can make the configured limit too dense: 2,000 in 1 ms
    await redis.del("l:{r}:paid", "reg:{r}");
    await redis.hset("reg:{r}", { tier: "paid", "window:burst": "1" });
    expect((await burst(2000, 2))![0]![1]).toEqual([1, 1999, 2, 0, 2000, 2]);
    // the same density within the bound is the key's: 2,000 in 2 ms
    await redis.del("l:{r}:paid");
    await redis.hset("reg:{r}", { "limit:burst": "2000", "window:burst": "2" });
    expect((await burst(5, 1))![0]![1]).toEqual([1, 1999, 2, 0, 2000, 2]);
  });

  it("reads a tier written by hand that is no tier name (empty, a space, a colon or a brace, past 32 characters) as no tier field: the key's configured tier decides", async () => {
    for (const tier of ["", "x y", "a:b", "{b}", "t".repeat(33), "caf\u00e9", "paid\n"]) {
      await redis.del("l:{r}:free");
      await redis.hset("reg:{r}", { tier });
      const reply = await keyCall("free", "free");
      expect({ tier, reply }).toEqual({ tier, reply: [1, 4, 60_000, 0, 5, 60_000] });
      expect(() => toReply(reply, rules, { fallback: "free" })).not.toThrow();
      expect({ tier, reply: await keyCall("paid", "free") }).toEqual({ tier, reply: [5, "free"] });
      // a key nobody configured: as with no entry, unknown
      expect({ tier, reply: await keyCall("free", "") }).toEqual({ tier, reply: [3] });
    }
    // a name of 32 characters is one
    await redis.hset("reg:{r}", { tier: "t-_9".repeat(8) });
    expect(await keyCall("free", "free")).toEqual([5, "t-_9".repeat(8)]);
  });
});
