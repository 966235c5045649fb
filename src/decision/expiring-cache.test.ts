import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createExpiringCache } from "./expiring-cache.ts";

describe("createExpiringCache", () => {
  it("holds an entry until it lapses, and makes the least recently used one room when full", () => {
    const cache = createExpiringCache<string>(2);
    cache.set("a", 100, "A", 0);
    cache.set("b", 100, "B", 0);
    expect(cache.get("a", 50)?.value).toBe("A"); // now the most recently used
    cache.set("c", 100, "C", 50);
    expect([cache.get("a", 50)?.value, cache.get("b", 50)?.value, cache.get("c", 50)?.value]).toEqual(["A", undefined, "C"]);
    expect(cache.get("a", 100)).toBeUndefined();
  });

  it("lets lapsed entries go as new ones come, so a cache that is never full does not keep every caller it ever refused", () => {
    const cache = createExpiringCache<number>(10_000);
    for (let i = 0; i < 1000; i++) cache.set(`caller-${i}`, i + 10, i, i);
    // each caller was held 10 ms: at most the ones of the last 10 ms (and one more) are left
    expect(cache.size).toBeLessThanOrEqual(12);
    expect(cache.get("caller-999", 1000)?.value).toBe(999);
  });

  it("shrinks back after a burst once its entries have lapsed", () => {
    const cache = createExpiringCache<number>(100_000);
    for (let i = 0; i < 10_000; i++) cache.set(`burst-${i}`, 1_000, i, 0);
    expect(cache.size).toBe(10_000);
    // an hour on, a trickle of refusals: each takes two lapsed entries with it
    for (let i = 0; i < 6_000; i++) cache.set(`later-${i}`, 3_600_000 + 10_000_000, i, 3_600_000);
    expect(cache.size).toBe(6_000);
  });

  it("keeps the order of use a plain least-recently-used list keeps, whatever it is asked (fast-check)", () => {
    const key = fc.constantFrom("iA|t|m", "iA|t|h", "iB|t|m", "iC|t|m", "iD|t|m");
    const op = fc.oneof(
      { arbitrary: fc.record({ op: fc.constant("set" as const), key, ttl: fc.integer({ min: 1, max: 80 }) }), weight: 4 },
      { arbitrary: fc.record({ op: fc.constant("get" as const), key }), weight: 4 },
      { arbitrary: fc.record({ op: fc.constant("forget" as const), prefix: fc.constantFrom("iA|", "iB|", "iZ|") }), weight: 1 },
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.array(op, { maxLength: 60, size: "max" }), (size, ops) => {
        const cache = createExpiringCache<number>(size);
        // the model: keys from least to most recently used
        let model: { key: string; until: number; value: number }[] = [];
        // the clock: one step per operation
        ops.forEach((o, now) => {
          if (o.op === "set") {
            cache.set(o.key, now + o.ttl, now, now);
            model = model.filter((e) => e.key !== o.key);
            for (let i = 0; i < 2; i++) {
              const oldest = model[0];
              if (!oldest || (oldest.until > now && model.length < size)) break;
              model.shift();
            }
            model.push({ key: o.key, until: now + o.ttl, value: now });
          } else if (o.op === "get") {
            const entry = model.find((e) => e.key === o.key);
            model = model.filter((e) => e.key !== o.key);
            const live = entry && entry.until > now ? entry : undefined;
            if (live) model.push(live);
            expect(cache.get(o.key, now)?.value).toBe(live?.value);
          } else {
            const before = model.length;
            model = model.filter((e) => !e.key.startsWith(o.prefix));
            expect(cache.forget(o.prefix)).toBe(before - model.length);
          }
          expect(cache.size).toBe(model.length);
        });
      }),
      { numRuns: 1000 },
    );
  });

  it("counts a key read again as used again, also right after another key came in", () => {
    const cache = createExpiringCache<string>(3);
    cache.set("A", 100, "A", 0);
    cache.set("B", 100, "B", 0);
    cache.get("A", 0);
    cache.set("C", 100, "C", 0);
    cache.get("A", 0); // A is now the most recently used, after C
    cache.set("D", 100, "D", 0); // B goes
    cache.set("E", 100, "E", 0); // then C, not A
    expect(["A", "B", "C", "D", "E"].map((k) => cache.get(k, 0)?.value)).toEqual(["A", undefined, undefined, "D", "E"]);
  });

  it("forgets every entry of an identity by its prefix", () => {
    const cache = createExpiringCache<number>(10);
    cache.set("iA|t|m", 100, 1, 0);
    cache.set("iA|t|h", 100, 2, 0);
    cache.set("iB|t|m", 100, 3, 0);
    expect(cache.forget("iA|")).toBe(2);
    expect(cache.size).toBe(1);
  });
});
