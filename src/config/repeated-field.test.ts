import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { repeatedField } from "./repeated-field.ts";

describe("repeatedField", () => {
  it("finds a field named twice in an object, with the path of that object", () => {
    expect(repeatedField('{"rules":[{"name":"a","limit":1},{"name":"b","limit":2,"window":"1s","limit":3}]}', "RATE_LIMITS")).toEqual({
      at: "RATE_LIMITS.rules[1]",
      field: "limit",
    });
    expect(repeatedField('{"identity":{"header":"x-api-key"},"identity":{}}', "RATE_LIMITS")).toEqual({ at: "RATE_LIMITS", field: "identity" });
    expect(repeatedField('{"tiers":{"free":{"rules":[[],{"x":{"y":1,"y":2}}]}}}', "R")).toEqual({ at: "R.tiers.free.rules[1].x", field: "y" });
  });

  it("reads a field the way JSON.parse does: escapes are the same name, and a name's text is never a bracket or a separator", () => {
    expect(repeatedField('{"limit":1,"\\u006cimit":2}', "R")).toEqual({ at: "R", field: "limit" });
    expect(repeatedField('{"a\\"{[,":1,"b":{"a\\"{[,":2},"c":["}",",","]"],"d":"\\\\"}', "R")).toBeUndefined();
  });

  it("takes the same name in different objects, and as a value, for no repetition", () => {
    expect(repeatedField('{"rules":[{"name":"limit","limit":1},{"name":"b","limit":2}],"limit":{"limit":"limit"}}', "R")).toBeUndefined();
    expect(repeatedField('[{"a":1},{"a":1}]', "R")).toBeUndefined();
  });

  it("answers undefined for every document whose objects each name a field once, and finds the first repetition planted in one", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
        const text = JSON.stringify(value);
        expect(repeatedField(text, "R")).toBeUndefined();
        // the first object in the text (by its "{"), with its first field written again at its end
        const first = /\{"((?:[^"\\]|\\.)*)":/.exec(text);
        if (!first) return;
        const close = closingBrace(text, first.index);
        const planted = `${text.slice(0, close)},"${first[1]}":0${text.slice(close)}`;
        expect(JSON.parse(planted)).toBeTypeOf("object");
        expect(repeatedField(planted, "R")?.field).toBe(JSON.parse(`"${first[1]}"`));
      }),
      { numRuns: 500 },
    );
  });
});

/** The index of the "}" that closes the object opening at `open` (strings skipped). */
function closingBrace(text: string, open: number): number {
  let depth = 0;
  for (const m of text.slice(open).matchAll(/"(?:[^"\\]|\\.)*"|[{}]/g)) {
    if (m[0] === "{") depth++;
    else if (m[0] === "}" && --depth === 0) return open + m.index;
  }
  throw new Error("no closing brace");
}
