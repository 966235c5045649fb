import { describe, expect, it } from "vitest";
import { createDenialCache } from "./denial-cache.ts";

describe("denial cache", () => {
  it("holds an entry until it lapses, and makes the least recently used one room when full", () => {
    const cache = createDenialCache<string>(2);
    cache.set("a", 100, "A", 0);
    cache.set("b", 100, "B", 0);
    expect(cache.get("a", 50)?.value).toBe("A"); // now the most recently used
    cache.set("c", 100, "C", 50);
    expect([cache.get("a", 50)?.value, cache.get("b", 50)?.value, cache.get("c", 50)?.value]).toEqual(["A", undefined, "C"]);
    expect(cache.get("a", 100)).toBeUndefined();
  });

  it("lets lapsed entries go as new ones come, so a cache that is never full does not keep every caller it ever refused", () => {
    const cache = createDenialCache<number>(10_000);
    for (let i = 0; i < 1000; i++) cache.set(`caller-${i}`, i + 10, i, i);
    // each caller was held 10 ms: at most the ones of the last 10 ms (and one more) are left
    expect(cache.size).toBeLessThanOrEqual(12);
    expect(cache.get("caller-999", 1000)?.value).toBe(999);
  });

  it("shrinks back after a burst once its entries have lapsed", () => {
    const cache = createDenialCache<number>(100_000);
    for (let i = 0; i < 10_000; i++) cache.set(`burst-${i}`, 1_000, i, 0);
    expect(cache.size).toBe(10_000);
    // an hour on, a trickle of refusals: each takes two lapsed entries with it
    for (let i = 0; i < 6_000; i++) cache.set(`later-${i}`, 3_600_000 + 10_000_000, i, 3_600_000);
    expect(cache.size).toBe(6_000);
  });

  it("forgets every entry of an identity by its prefix", () => {
    const cache = createDenialCache<number>(10);
    cache.set("iA|t|m", 100, 1, 0);
    cache.set("iA|t|h", 100, 2, 0);
    cache.set("iB|t|m", 100, 3, 0);
    expect(cache.forget("iA|")).toBe(2);
    expect(cache.size).toBe(1);
  });
});
