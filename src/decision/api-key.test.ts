import { describe, expect, it } from "vitest";
import { readKey, trimKey } from "./api-key.ts";

describe("trimKey", () => {
  it("drops from either end whatever an origin trims: JavaScript's whitespace, every C0 control, NEL, and what workerd reads an undecodable byte as", () => {
    const pads = [" ", "\t", "\u000b", "\u000c", "\u00a0", "\u2028", "\u3000", "\ufeff", "\u0000", "\u0001", "\u001c", "\u001f", "\u0085", "\ufffd"];
    for (const pad of pads) {
      const name = `U+${pad.charCodeAt(0).toString(16).padStart(4, "0")}`;
      expect(trimKey(`${pad}K${pad}`), name).toBe("K");
      expect(trimKey(`K${pad}${pad}${pad}`), name).toBe("K");
      // inside a key it is the key's own
      expect(trimKey(`K${pad}K`), name).toBe(`K${pad}K`);
    }
    expect(trimKey(pads.join(""))).toBe("");
  });

  it("keeps what no common origin trims, so a key without it hashes as before", () => {
    for (const kept of ["\u007f", "\u0080", "\u00ad", "\u200b", "é", "😀"]) expect(trimKey(`K${kept}`)).toBe(`K${kept}`);
    expect(trimKey("sk-live-abc123")).toBe("sk-live-abc123");
  });

  it("takes time in proportion to the key, however its spaces lie", () => {
    const key = `K${" ".repeat(60_000)}K`;
    const started = performance.now();
    expect(trimKey(key)).toBe(key);
    expect(performance.now() - started).toBeLessThan(200);
  });
});

describe("readKey", () => {
  it("is one key, absent, or ambiguous — never a new identity made of two, nor of one padded", () => {
    expect(readKey("x-api-key", null)).toEqual({ kind: "absent" });
    expect(readKey("x-api-key", " \u0085 ")).toEqual({ kind: "absent" });
    expect(readKey("x-api-key", "K\u0085")).toEqual({ kind: "key", key: "K" });
    expect(readKey("x-api-key", "\u001fK\ufffd")).toEqual({ kind: "key", key: "K" });
    expect(readKey("x-api-key", "K, K")).toEqual({ kind: "ambiguous" });
  });

  it("in Authorization is the token, whatever the scheme's case or the spaces around it; more words are ambiguous", () => {
    for (const value of ["Bearer K", "bearer K", "BEARER K", "Bearer  K", "Bearer\tK", " Bearer K\u0085", "Bearer\u0085K", "Token K", "K"]) {
      expect(readKey("authorization", value), JSON.stringify(value)).toEqual({ kind: "key", key: "K" });
    }
    for (const value of ["Bearer K x", "Bearer K  K", "x Bearer K", "Bearer K, Bearer K"]) expect(readKey("authorization", value), value).toEqual({ kind: "ambiguous" });
    expect(readKey("authorization", " \t ")).toEqual({ kind: "absent" });
    // Rails' token parameter: the token, quoted or not; a ; (Rails reads what is before it) is ambiguous
    for (const value of ['Token token="K"', "Bearer token=K", 'Bearer "K"', 'Bearer token="K', 'token="K"']) {
      expect(readKey("authorization", value), value).toEqual({ kind: "key", key: "K" });
    }
    for (const value of ["Bearer K;x", "Bearer K;", "Bearer ;K", 'Token token="K";nonce="1"']) expect(readKey("authorization", value), value).toEqual({ kind: "ambiguous" });
    for (const value of ['Bearer ""', "Bearer token=", 'Token token=""']) expect(readKey("authorization", value), value).toEqual({ kind: "absent" });
    // once only, as Rails reads it: what is left of a second prefix or quote is the token's own
    expect(readKey("authorization", "Bearer token=token=K")).toEqual({ kind: "key", key: "token=K" });
    expect(readKey("authorization", 'Bearer ""K""')).toEqual({ kind: "key", key: '"K"' });
    // Basic credentials in canonical base64 only: lenient decoders read every other spelling as the same credentials
    for (const value of ["Basic c2tfbGl2ZTo=", "basic  c2tfbGl2ZTo=", 'Basic "c2tfbGl2ZTo="'])
      expect(readKey("authorization", value), value).toEqual({ kind: "key", key: "c2tfbGl2ZTo=" });
    for (const value of ["Basic c2s=", "Basic YQ==", "Basic c2s6"]) expect(readKey("authorization", value).kind, value).toBe("key");
    for (const value of [
      "Basic c2tf.bGl2ZTo=",
      "Basic c2tfbGl2ZTp=",
      "Basic c2tfbGl2ZTo",
      "Basic c2tfbGl2ZTo==",
      "Basic c2t=",
      "Basic YR==",
      "Basic c2tfbGl2ZTo=x",
      "Basic c2_fbGl2ZTo=",
      "Basic K",
      "Basic sk-live-1",
    ]) {
      expect(readKey("authorization", value), value).toEqual({ kind: "ambiguous" });
    }
    // any other header's value is the key, spaces and all
    expect(readKey("x-api-key", 'token="K";x')).toEqual({ kind: "key", key: 'token="K";x' });
    expect(readKey("x-api-key", "Bearer K")).toEqual({ kind: "key", key: "Bearer K" });
  });
});
