import fc from "fast-check";
import type Redis from "ioredis";
import { expect, it } from "vitest";
import { toReply } from "../../src/script/limiter.ts";
import { scriptRedis } from "../helpers/script-redis.ts";

// The model (test/model/sliding-window.ts) restates the script's rules, so the two can agree on a
// rule that is itself wrong. This file holds the script to what the rules are for, from its
// replies alone: what it admits never weighs more than a rule's limit in any of the rule's
// windows, and a denied request asked again once its Retry-After has passed is admitted.
// Windows here are short (1 to 200 ms) and calls come at the same instant often, where entries
// stand 1 µs apart ahead of the clock; callers' clocks differ by up to `SKEW` of the shortest
// window, as the edge clocks of a fleet do.
//
// SLIDEGATE_INVARIANT_RUNS=3000 for a longer hunt; CI runs the default.
const RUNS = Number(process.env.SLIDEGATE_INVARIANT_RUNS ?? 60);
const T0 = 1_764_000_000_000_000; // µs
/** how far behind the true time a caller's clock may run, as a share of the shortest window */
const SKEW = 0.3;

let redis: Redis;
let sha: string;
scriptRedis((r, s) => ([redis, sha] = [r, s]));

const windowMs = fc.oneof(fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 200 }));
// A limit up to the window's microseconds: entries stand at least 1 µs apart, so a log cannot hold
// more than that in one window (see the script's header on a log ahead of the clock).
const ruleArb = windowMs.chain((w) =>
  fc.record({ windowMs: fc.constant(w), limit: fc.oneof(fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: Math.min(3000, w * 1000) })) }),
);
// a key's own limit and window for a rule, from the registry
const ownArb = fc.option(
  fc.record({ limit: fc.option(fc.integer({ min: 1, max: 3000 }), { nil: undefined }), windowMs: fc.option(fc.integer({ min: 3, max: 200 }), { nil: undefined }) }),
  { nil: undefined },
);
const step = fc.record({
  rules: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
  // a share of the smallest limit on the log: every cost fits some window
  costs: fc.array(fc.oneof(fc.constant(0), fc.double({ min: 0, max: 1, noNaN: true })), { minLength: 3, maxLength: 3 }),
  dt: fc.oneof({ weight: 5, arbitrary: fc.constant(0) }, fc.integer({ min: 1, max: 3 }), fc.integer({ min: 0, max: 5_000 }), fc.integer({ min: 0, max: 300_000 })),
  /** how far behind the true time this caller's clock runs, as a share of the allowed skew */
  behind: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 1, noNaN: true })),
  /** when denied, ask again once the Retry-After has passed */
  retry: fc.boolean(),
});

it(`never admits more than a rule's limit in one of its windows, and never answers a Retry-After before the request fits (${RUNS} sequences)`, async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(ruleArb, { minLength: 3, maxLength: 3 }),
      fc.array(ownArb, { minLength: 3, maxLength: 3 }),
      fc.constantFrom([0, 1, 2], [0, 0, 2], [0, 1, 1], [0, 0, 0]),
      fc.array(step, { minLength: 1, maxLength: 120, size: "max" }),
      async (configured, own, logOf, steps) => {
        await redis.flushall();
        // an API key with its own numbers for some rules, or an address
        const fields: Record<string, string> = {};
        own.forEach((o, i) => {
          if (o?.limit) fields[`limit:r${i}`] = String(o.limit);
          if (o?.windowMs) fields[`window:r${i}`] = String(o.windowMs);
        });
        const key = Object.keys(fields).length > 0;
        if (key) await redis.hset("sg:{a}:key", { tier: "t", ...fields });
        // the key's own numbers, unless they count more than a log can (more than the window's
        // µs): then the rule's
        const rules = configured.map((r, i) => {
          const mine = { limit: own[i]?.limit ?? r.limit, windowMs: own[i]?.windowMs ?? r.windowMs };
          return key && mine.limit <= mine.windowMs * 1000 ? mine : r;
        });
        const limitOf = (log: number) => Math.min(...rules.filter((_, i) => logOf[i] === log).map((r) => r.limit));
        const skew = SKEW * Math.min(...rules.map((r) => r.windowMs)) * 1000;
        const admitted: { at: number; cost: number }[][] = [[], [], []];
        // No log runs out on Redis's real clock: each TTL a call sets is turned into a deadline on
        // the true clock of this test and PERSISTed in the same transaction; a log whose deadline
        // has come expires then.
        const deadline = new Map<string, number>();
        let trueNow = T0;

        const call = async (picked: number[], costs: number[], behind: number) => {
          const now = trueNow - Math.round(behind * skew);
          // rules that share a log see the same requests: one is asked about, all of them are
          const chosen = [0, 1, 2].filter((i) => picked.some((p) => logOf[p] === logOf[i]));
          const asked = chosen.map((i) => ({ name: `r${i}`, ...configured[i]!, cost: 1 + Math.floor(costs[logOf[i]!]! * (limitOf(logOf[i]!) - 1)), shadow: false }));
          const logs = chosen.map((i) => `sg:{a}:t:log${logOf[i]}`);
          const unique = [...new Set(logs)];
          for (const log of unique) {
            if (trueNow >= (deadline.get(log) ?? Number.POSITIVE_INFINITY)) {
              await redis.del(log);
              deadline.delete(log);
            }
          }
          const tx = redis
            .multi()
            .evalsha(
              sha,
              2 + logs.length,
              "sg:{a}:block",
              "sg:{a}:key",
              ...logs,
              String(now),
              "t",
              key ? "t" : "-",
              ...asked.flatMap((r) => [r.name, r.limit, r.windowMs, r.cost, 0]),
            );
          for (const log of unique) tx.pttl(log).persist(log);
          const results = (await tx.exec())!;
          if (results[0]![0]) throw results[0]![0];
          const reply = results[0]![1] as number[];
          unique.forEach((log, j) => {
            const pttl = results[1 + 2 * j]![1] as number;
            if (pttl >= 0) deadline.set(log, trueNow + pttl * 1000);
            else if (pttl === -2) deadline.delete(log);
          });
          expect(() => toReply(reply, asked, key ? { fallback: "t" } : undefined)).not.toThrow();
          if (reply[0] === 1) for (const [j, i] of chosen.entries()) admitted[i]!.push({ at: trueNow, cost: asked[j]!.cost });
          return reply;
        };

        for (const s of steps) {
          trueNow += s.dt;
          const picked = [0, 1, 2].filter((i) => s.rules[i]);
          if (picked.length === 0) picked.push(0);
          const reply = await call(picked, s.costs, s.behind);
          if (reply[0] === 1 || !s.retry) continue;
          const waits = reply.slice(1).filter((_, j) => j % 5 === 2);
          // -1: the request weighs more than a key's own limit, and never fits
          if (waits.some((w) => w < 0)) continue;
          const wait = Math.max(...waits);
          trueNow += wait * 1000;
          // the same caller, on the same clock: the request fits now, with nothing else admitted since
          expect({ reply, wait, again: (await call(picked, s.costs, s.behind))[0] }).toEqual({ reply, wait, again: 1 });
        }

        // each rule's windows on the true clock, from each admission on; a clock behind by up
        // to `skew` may end a window that much early
        rules.forEach((r, i) => {
          const a = admitted[i]!;
          for (let x = 0; x < a.length; x++) {
            let weight = 0;
            for (let y = x; y < a.length && a[y]!.at < a[x]!.at + r.windowMs * 1000 - skew; y++) weight += a[y]!.cost;
            expect({ rule: i, ...r, from: a[x]!.at, weight }).toEqual({ rule: i, ...r, from: a[x]!.at, weight: Math.min(weight, r.limit) });
          }
        });
      },
    ),
    { numRuns: RUNS },
  );
}, 600_000);
