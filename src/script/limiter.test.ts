import { describe, expect, it } from "vitest";
import { type Limit, LimiterError, refusesWrites, toReply } from "./limiter.ts";

const second: Limit = { name: "second", limit: 1, windowMs: 1000 };
const hour: Limit = { name: "hour", limit: 100, windowMs: 3_600_000 };

describe("toReply", () => {
  it("takes the waits of a shared log read by a clock behind its newest entry, up to the longest window ahead", () => {
    // a clock stepped back 30 minutes: the one-second rule of a log kept for an hour waits that long
    const reply = [0, 0, 1_800_001, 1_800_001, 1, 1000, 50, 1_800_000, 0, 100, 3_600_000];
    const r = toReply(reply, [second, hour], undefined);
    expect(r.kind === "decided" && r.decision.retryAfterMs).toBe(1_800_001);
    // past any window a log can stand ahead: no reply of the script's
    expect(() => toReply([0, 0, 1, 3_601_001, 1, 1000, 50, 1, 0, 100, 3_600_000], [second, hour], undefined)).toThrow(LimiterError);
  });

  it("refuses what the script never answers: another tier to an address call, counts outside 0..limit, a denial naming no enforced rule", () => {
    for (const reply of [[5, "paid"], [3], [1, -1, 0, 0, 1, 1000], [1, 2, 0, 0, 1, 1000], [0, 0, 10, 0, 1, 1000], [1, 0, 0, 0, 2, 1000]]) {
      expect(() => toReply(reply, [second], undefined), JSON.stringify(reply)).toThrow(LimiterError);
    }
    expect(toReply([5, "paid"], [second], { fallback: "free" })).toEqual({ kind: "other-tier", tier: "paid" });
    // a key's override of the limit and window comes back in the reply
    expect(toReply([1, 9, 0, 0, 10, 2000], [second], { fallback: "free" }).kind).toBe("decided");
  });

  it("refuses a decision whose numbers contradict it: a wait on an admitted rule, room on a rule that does not fit, an admission it did not count", () => {
    const minute: Limit = { name: "minute", limit: 5, windowMs: 60_000, cost: 3 };
    const shadow: Limit = { ...second, shadow: true };
    // what the script answers (true): each rule's remaining after the request was counted
    // (admitted) or as it stood (denied), a wait only where the request does not fit; and what
    // contradicts it (false)
    const replies: [unknown[], readonly Limit[], boolean][] = [
      [[1, 99, 3_600_000, 0, 100, 3_600_000], [hour], true],
      [[1, 2, 60_000, 0, 5, 60_000], [minute], true],
      [[0, 2, 40_000, 40_000, 5, 60_000], [minute], true],
      [[0, 0, 10, 10, 1, 1000, 50, 1000, 0, 100, 3_600_000], [second, hour], true],
      [[1, 0, 500, 500, 1, 1000, 99, 3_600_000, 0, 100, 3_600_000], [shadow, hour], true],
      [[1, 0, 1000, 0, 1, 1000], [shadow], true],
      // admitted, yet an enforced rule waits: the wait would reach Retry-After when the address's side denies
      [[1, 0, 1000, 500, 1, 1000], [second], false],
      [[1, 98, 3_600_000, 3_600_000, 100, 3_600_000], [hour], false],
      // admitted, yet the request is not among what the rule counts
      [[1, 100, 3_600_000, 0, 100, 3_600_000], [hour], false],
      [[1, 3, 60_000, 0, 5, 60_000], [minute], false],
      // a rule that waits with room for the request
      [[0, 3, 40_000, 40_000, 5, 60_000], [minute], false],
      [[1, 1, 500, 500, 1, 1000, 99, 3_600_000, 0, 100, 3_600_000], [shadow, hour], false],
      // a rule of a denial that fits, without room for the request
      [[0, 0, 10, 10, 1, 1000, 0, 1000, 0, 100, 3_600_000], [second, hour], false],
      [[0, 2, 40_000, 40_000, 5, 60_000, 2, 0, 0, 5, 60_000], [minute, { ...minute, name: "other" }], false],
    ];
    for (const [reply, limits, script] of replies) {
      if (script) expect(toReply(reply, limits, undefined).kind, JSON.stringify(reply)).toBe("decided");
      else expect(() => toReply(reply, limits, undefined), JSON.stringify(reply)).toThrow(LimiterError);
    }
  });

  it("reads a block too long to count as a block without end, as the script's -1", () => {
    for (const ms of [9.998e15, -9223372036854776000, -1]) expect(toReply([2, ms], [second], undefined)).toEqual({ kind: "blocked", ms: Number.POSITIVE_INFINITY });
    expect(toReply([2, 0], [second], undefined)).toEqual({ kind: "blocked", ms: 1 });
  });
});

describe("refusesWrites", () => {
  const failed = (message: string) => new LimiterError(`rate-limit store failed: ${message}`, { cause: new Error(message) });
  it("reads a full store from Redis's OOM refusal, not from a command that names OOM", () => {
    expect(refusesWrites(failed(`OOM command not allowed when used memory > 'maxmemory'., command was: ["evalsha","x","1","sg:{a}:block"]`))).toBe(true);
    // a tier, rule or prefix named OOM is quoted in every error about that command
    expect(refusesWrites(failed(`NOSCRIPT No matching script., command was: ["evalsha","x","3","OOM:{a}:block","OOM:{a}:key","OOM:{a}:t:OOM"]`))).toBe(false);
    expect(refusesWrites(failed(`NOSCRIPT No matching script., command was: ["evalsha","x","3","sg:{a}:block","sg:{a}:key","sg:{a}:t:OOM command"]`))).toBe(false);
    expect(refusesWrites(new LimiterError("rate-limit store failed: timeout"))).toBe(false);
  });

  it.each([
    ["a replica (a primary a failover demoted)", "READONLY You can't write against a read only replica."],
    ["a failed snapshot under stop-writes-on-bgsave-error", "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."],
    ["too few replicas for min-replicas-to-write", "NOREPLICAS Not enough good replicas to write."],
  ])("reads %s as a store that takes no writes, and a busy or unreachable one as not", (_, refusal) => {
    expect(refusesWrites(failed(`${refusal}, command was: ["evalsha","x","1","sg:{a}:block"]`))).toBe(true);
    expect(refusesWrites(failed(`BUSY Redis is busy running a script., command was: ["evalsha","x","3","READONLY:{a}:block"]`))).toBe(false);
    // the refusal's own words, quoted inside another error (a rule named so, or a script's error), are no refusal
    const word = refusal.slice(0, refusal.indexOf(" "));
    expect(refusesWrites(failed(`ERR Error running script, ${refusal}`))).toBe(false);
    expect(refusesWrites(failed(`NOSCRIPT No matching script., command was: ["evalsha","x","3","sg:{a}:block","sg:{a}:key","sg:{a}:t:${word} x"]`))).toBe(false);
    expect(refusesWrites(failed("ERR redis unavailable"))).toBe(false);
  });
});
