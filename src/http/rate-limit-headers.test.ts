import { describe, expect, it } from "vitest";
import type { LimitState } from "../script/limiter.ts";
import { rateLimitFields, retryAfterSeconds } from "./rate-limit-headers.ts";

const limit = (name: string, remaining: number, resetMs: number): LimitState => ({ name, limit: 10, windowMs: 60_000, shadow: false, remaining, resetMs, retryMs: 0 });
const trio = (limits: LimitState[]) => {
  const fields = new Headers(rateLimitFields({ admitted: true, limits, retryAfterMs: 0, wouldDeny: [] }));
  return [fields.get("X-RateLimit-Limit"), fields.get("X-RateLimit-Remaining"), fields.get("X-RateLimit-Reset")];
};

describe("retryAfterSeconds", () => {
  it("rounds up to whole seconds and never says less than 1: a 0 invites an instant retry storm", () => {
    expect(retryAfterSeconds(1)).toBe("1");
    expect(retryAfterSeconds(1000)).toBe("1");
    expect(retryAfterSeconds(1001)).toBe("2");
    expect(retryAfterSeconds(0)).toBe("1");
    expect(retryAfterSeconds(-250)).toBe("1");
  });
});

describe("rateLimitFields", () => {
  it("reports in the X-RateLimit-* trio the limit with least remaining, and on a tie the one that resets last", () => {
    expect(trio([limit("a", 5, 10_000), limit("b", 2, 1_000)])).toEqual(["10", "2", "1"]);
    expect(trio([limit("a", 2, 1_000), limit("b", 2, 30_000), limit("c", 2, 5_000)])).toEqual(["10", "2", "30"]);
    expect(trio([limit("a", 2, 30_000), limit("b", 2, 1_000)])).toEqual(["10", "2", "30"]);
  });
});
