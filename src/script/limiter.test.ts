import { describe, expect, it } from "vitest";
import { isStoreFull, type Limit, LimiterError, toReply } from "./limiter.ts";

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

  it("reads a block too long to count as a block without end, as the script's -1", () => {
    for (const ms of [9.998e15, -9223372036854776000, -1]) expect(toReply([2, ms], [second], undefined)).toEqual({ kind: "blocked", ms: Number.POSITIVE_INFINITY });
    expect(toReply([2, 0], [second], undefined)).toEqual({ kind: "blocked", ms: 1 });
  });
});

describe("isStoreFull", () => {
  it("reads a full store from Redis's OOM refusal, not from a command that names OOM", () => {
    const failed = (message: string) => new LimiterError(`rate-limit store failed: ${message}`, { cause: new Error(message) });
    expect(isStoreFull(failed(`OOM command not allowed when used memory > 'maxmemory'., command was: ["evalsha","x","1","sg:{a}:block"]`))).toBe(true);
    // a tier, rule or prefix named OOM is quoted in every error about that command
    expect(isStoreFull(failed(`NOSCRIPT No matching script., command was: ["evalsha","x","3","OOM:{a}:block","OOM:{a}:key","OOM:{a}:t:OOM"]`))).toBe(false);
    expect(isStoreFull(new LimiterError("rate-limit store failed: timeout"))).toBe(false);
  });
});
