import { describe, expect, it } from "vitest";
import { didYouMean, nearest } from "./nearest.ts";

const RULE_FIELDS = ["name", "limit", "window", "cost", "path", "methods", "fail", "timeout", "shadow"];

describe("nearest", () => {
  it("names the field a typo, a swap, a missing or an extra letter was meant to be", () => {
    expect(["limt", "lmiit", "limits", "widnow", "windw", "methds", "timout", "shadwo"].map((n) => nearest(n, RULE_FIELDS))).toEqual([
      "limit",
      "limit",
      "limit",
      "window",
      "window",
      "methods",
      "timeout",
      "shadow",
    ]);
  });

  it("names a field spelt in another case, whatever its length", () => {
    expect(nearest("unknownkeys", ["header", "required", "unknownKeys"])).toBe("unknownKeys");
    expect(nearest("CLOCK", ["clock", "cors"])).toBe("clock");
  });

  it("names nothing when no field is that close, so a wrong guess is never offered", () => {
    expect(nearest("colour", RULE_FIELDS)).toBeUndefined();
    expect(nearest("rate", RULE_FIELDS)).toBeUndefined();
    // one edit away is all a short name may be: "fa" is two from "fail"
    expect(nearest("fa", RULE_FIELDS)).toBeUndefined();
    // any name of one or two characters is an edit from any other: only another case of it is offered
    expect([nearest("b", ["a"]), nearest("ab", ["ac"]), nearest("A", ["a"])]).toEqual([undefined, undefined, "a"]);
    expect(nearest("x".repeat(65), ["x".repeat(64)])).toBeUndefined();
  });

  it("prefers the closest name, and the first of equally close ones", () => {
    expect(nearest("pat", ["path", "pats"])).toBe("path");
    expect(nearest("cot", ["cost", "cat"])).toBe("cost");
    expect(nearest("limi", ["limit", "lime"])).toBe("limit");
    expect(nearest("limx", ["lim", "limit"])).toBe("lim");
  });

  it("words the suggestion for a refusal, or nothing at all", () => {
    expect(didYouMean("rejected", ["defaultTier", "reject", "ip"])).toBe('; did you mean "reject"?');
    expect(didYouMean("block", ["defaultTier", "reject", "ip"])).toBe("");
  });
});
