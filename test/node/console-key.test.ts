import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { READ_KEY_JS } from "../../src/console/key-reading.ts";
import { readKey } from "../../src/decision/api-key.ts";

// The console hashes a looked-up key in the browser with its own copy of the gate's reading:
// the two must agree, or the console shows (and blocks, resets, registers) a key the gate never counts.
const consoleReadKey = new Function(`${READ_KEY_JS}; return readKey;`)() as (header: string, value: string) => unknown;

describe("the console's key reading", () => {
  it("reads every value of the key header as the gate does (fast-check)", () => {
    const char = fc.constantFrom(
      "K",
      "k",
      "B",
      "Basic",
      "c2s=",
      "c2t=",
      "=",
      "_",
      ".",
      "token=",
      '"',
      ";",
      " ",
      "\t",
      "\u000b",
      "\u0000",
      "\u001f",
      "\u0085",
      "\u00a0",
      "\u3000",
      "\ufeff",
      "\ufffd",
      "\u007f",
      ",",
      "é",
    );
    fc.assert(
      fc.property(fc.constantFrom("x-api-key", "authorization"), fc.array(char, { maxLength: 12 }), (header, chars) => {
        const value = chars.join("");
        expect(consoleReadKey(header, value), JSON.stringify([header, value])).toEqual(readKey(header, value));
      }),
      { numRuns: 5000 },
    );
    expect(consoleReadKey("authorization", "bearer  sk-1\u0085")).toEqual({ kind: "key", key: "sk-1" });
  });
});
