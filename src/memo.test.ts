import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { memo } from "./memo.ts";

describe("memo", () => {
  it("works a result out once per input while it is held", () => {
    const calls: string[] = [];
    const upper = memo((s: string) => {
      calls.push(s);
      return s.toUpperCase();
    }, 2);
    expect([upper("a"), upper("a"), upper("b"), upper("a")]).toEqual(["A", "A", "B", "A"]);
    expect(calls).toEqual(["a", "b"]);
  });

  it("holds at most `size` inputs, letting the oldest go first", () => {
    const calls: string[] = [];
    const same = memo((s: string) => {
      calls.push(s);
      return s;
    }, 2);
    for (const s of ["a", "b", "c", "b", "a"]) same(s);
    // "c" pushed "a" out; "b" was still held; "a" is worked out again
    expect(calls).toEqual(["a", "b", "c", "a"]);
  });

  it("works out again exactly the inputs a list of the last `size` held ones lacks, whatever it is asked (fast-check)", () => {
    // a model: the inputs held, oldest first; a result `keep` refuses is never held
    const input = fc.constantFrom("a", "b", "c", "big");
    fc.assert(
      fc.property(fc.array(input, { maxLength: 40 }), fc.integer({ min: 1, max: 3 }), (asked, size) => {
        const calls: string[] = [];
        const same = memo(
          (s: string) => {
            calls.push(s);
            return s;
          },
          size,
          (s) => s !== "big",
        );
        const held: string[] = [];
        const expected: string[] = [];
        for (const s of asked) {
          expect(same(s)).toBe(s);
          if (held.includes(s)) continue;
          expected.push(s);
          if (s === "big") continue;
          if (held.length >= size) held.shift();
          held.push(s);
        }
        expect(calls).toEqual(expected);
      }),
    );
  });

  it("remembers an undefined result too", () => {
    let calls = 0;
    const nothing = memo(() => void calls++, 4);
    nothing("x");
    nothing("x");
    expect(calls).toBe(1);
  });
});
