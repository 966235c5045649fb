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

  it("forgets an address once its attempts have all left the window, the one whose newest came first", () => {
    const attempts = createLocalAttempts({ limit: 1, windowMs: 1000, addresses: 2 });
    attempts.record("a", 0);
    attempts.record("b", 500);
    attempts.record("a", 600); // refused: a's newest attempt is still the one at 0
    expect(attempts.record("c", 1000)).toBe(0); // a goes, b stays
    expect(attempts.record("b", 1001)).toBe(499);
    expect(attempts.record("a", 1002)).toBe(498); // the map is full of b and c: refused, not counted afresh
  });

  it("refuses another address, rather than forget one still counted, while every address held has attempts in the window", () => {
    const attempts = createLocalAttempts({ limit: 10, windowMs: 1000, addresses: 2 });
    for (let i = 0; i < 10; i++) attempts.record("a", i);
    attempts.record("b", 100);
    // before, cycling through more addresses than it holds forgot a's ten failures
    expect(attempts.record("c", 200)).toBe(809);
    expect(attempts.record("a", 300)).toBe(700);
    expect(attempts.record("c", 1010)).toBe(0);
  });

  it("lets a right token's attempt free its address's place", () => {
    const attempts = createLocalAttempts({ limit: 10, windowMs: 1000, addresses: 1 });
    attempts.record("operator", 0);
    attempts.takeBack("operator");
    expect(attempts.record("other", 1)).toBe(0);
  });
});
