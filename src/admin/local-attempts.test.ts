import { describe, expect, it } from "vitest";
import { createLocalAttempts } from "./local-attempts.ts";

describe("createLocalAttempts", () => {
  it("refuses past the limit until the oldest attempt leaves the window, counting nothing while it refuses", () => {
    const attempts = createLocalAttempts({ limit: 2, windowMs: 1000, addresses: 10 });
    expect(attempts.record("a", 0)).toBe(0);
    expect(attempts.record("a", 400)).toBe(0);
    expect(attempts.record("a", 500)).toBe(500);
    expect(attempts.record("a", 999)).toBe(1);
    expect(attempts.record("a", 1000)).toBe(0); // the first left; the refused ones were never counted
    expect(attempts.record("a", 1001)).toBe(399);
  });

  it("gives a right token's attempt back", () => {
    const attempts = createLocalAttempts({ limit: 1, windowMs: 1000, addresses: 10 });
    expect(attempts.record("a", 0)).toBe(0);
    attempts.takeBack("a");
    expect(attempts.record("a", 1)).toBe(0);
  });

  it("forgets the address counted longest ago once it holds as many as it may", () => {
    const attempts = createLocalAttempts({ limit: 1, windowMs: 1000, addresses: 2 });
    attempts.record("a", 0);
    attempts.record("b", 0);
    attempts.record("a", 1); // refused, and counted most recently
    attempts.record("c", 2); // b goes
    expect(attempts.record("a", 3)).toBeGreaterThan(0);
    expect(attempts.record("b", 3)).toBe(0);
  });
});
