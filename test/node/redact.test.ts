import { describe, expect, it } from "vitest";
import { redactUrl } from "../../scripts/shim/server.ts";

describe("redactUrl", () => {
  it("drops the password from a Redis URL and keeps the rest", () => {
    expect(redactUrl("redis://default:s3cret@cache.internal:6380/2")).toBe("redis://default@cache.internal:6380/2");
    expect(redactUrl("rediss://:s3cret@cache.internal:6380")).toBe("rediss://cache.internal:6380");
    expect(redactUrl("redis://127.0.0.1:6379")).toBe("redis://127.0.0.1:6379");
  });

  it("drops a password given as a query parameter, which ioredis takes as one (redis://host?password=…)", () => {
    expect(redactUrl("redis://cache.internal:6380?password=s3cret")).not.toContain("s3cret");
    expect(redactUrl("redis://cache.internal:6380/2?db=2&password=s3cret&sentinelPassword=t0p")).toBe("redis://cache.internal:6380/2?db=2");
  });
});
