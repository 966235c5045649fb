import { afterAll, describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { rateLimits, startGateFleet } from "../helpers/miniflare.ts";

const started: Fleet[] = [];
afterAll(async () => {
  await Promise.all(started.map((f) => f.dispose()));
});

describe("a fleet of two Worker instances", () => {
  it("shares one limit: under concurrent load exactly the limit is admitted", async () => {
    // a budget no loaded machine exhausts: this is about exactness, and a timed-out decision would fail open
    const fleet = await startGateFleet(2, { RATE_LIMITS: rateLimits({ timeout: 30_000, rules: [{ name: "default", limit: 50, window: "1m" }] }) });
    started.push(fleet);
    const codes = await fleet.burst(300, { "cf-connecting-ip": "198.51.100.77" });
    expect(codes.filter((s) => s === 200)).toHaveLength(50);
    expect(codes.filter((s) => s === 429)).toHaveLength(250);
  });
});
