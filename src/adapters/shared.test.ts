import { afterEach, describe, expect, it, vi } from "vitest";
import { notOnCloudflare } from "./shared.ts";

describe("notOnCloudflare", () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  it("takes a Worker by its user agent", () => {
    vi.stubGlobal("navigator", { userAgent: "Cloudflare-Workers" });
    expect(notOnCloudflare()).toBeUndefined();
  });

  it("takes a Worker without navigator (a compatibility date before 2022-03-21, or no_global_navigator) by workerd's own WebSocketPair", () => {
    vi.stubGlobal("navigator", undefined);
    vi.stubGlobal("WebSocketPair", function WebSocketPair() {});
    expect(notOnCloudflare()).toBeUndefined();
  });

  it("names any other runtime by its user agent, or says it is none", () => {
    vi.stubGlobal("navigator", { userAgent: "Node.js/22" });
    vi.stubGlobal("WebSocketPair", function WebSocketPair() {});
    expect(notOnCloudflare()).toBe("Node.js/22");
    vi.stubGlobal("navigator", undefined);
    vi.stubGlobal("WebSocketPair", undefined);
    expect(notOnCloudflare()).toBe("not a Cloudflare Worker");
  });
});
