import type { Miniflare } from "miniflare";
import { afterAll, describe, expect, it } from "vitest";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

const started: Miniflare[] = [];
afterAll(async () => {
  await Promise.all(started.map((mf) => mf.dispose()));
});

describe("a fleet of two Worker instances", () => {
  it("shares one limit: under concurrent load exactly the limit is admitted", async () => {
    const RATE_LIMITS = rateLimits({ rules: [{ name: "default", limit: 50, window: "1m" }] });
    const fleet = await Promise.all([startGateIsolate({ RATE_LIMITS }), startGateIsolate({ RATE_LIMITS })]);
    started.push(...fleet);
    const responses = await Promise.all(Array.from({ length: 300 }, (_, i) =>
      fleet[i % 2]!.dispatchFetch("http://gate.example/", { headers: { "cf-connecting-ip": "198.51.100.77" } }).then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      })));
    expect(responses.filter((s) => s === 200)).toHaveLength(50);
    expect(responses.filter((s) => s === 429)).toHaveLength(250);
  });
});
