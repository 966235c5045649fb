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

  it("remembers an undefined result too", () => {
    let calls = 0;
    const nothing = memo(() => void calls++, 4);
    nothing("x");
    nothing("x");
    expect(calls).toBe(1);
  });
});
