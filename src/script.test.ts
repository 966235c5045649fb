import { describe, expect, it } from "vitest";
import { SLIDING_WINDOW_SCRIPT, SLIDING_WINDOW_SHA1 } from "./script.ts";

describe("sliding-window script constant", () => {
  it("names the script by the SHA1 of the file's exact text", async () => {
    const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(SLIDING_WINDOW_SCRIPT));
    const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
    expect(hex).toBe(SLIDING_WINDOW_SHA1);
  });

  it("declares allow-key-locking on its first line", () => {
    expect(SLIDING_WINDOW_SCRIPT.split("\n")[0]).toBe("#!lua flags=allow-key-locking");
  });
});
