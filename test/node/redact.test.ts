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

describe("redactUrl, on every form of URL ioredis connects by", () => {
  // ioredis reads a REDIS_URL without a scheme as redis://… and one starting with / as a Unix
  // socket's path: read as a WHATWG URL instead, `default:s3cret@host:6379` is a URL of scheme
  // "default:" with no password at all, and the banner printed it whole
  it("drops the password of a URL written without a scheme, or with // alone, as ioredis reads them", () => {
    expect(redactUrl("default:s3cret@cache.internal:6380")).toBe("redis://default@cache.internal:6380");
    expect(redactUrl(":s3cret@cache.internal:6380")).toBe("redis://cache.internal:6380");
    expect(redactUrl("//default:s3cret@cache.internal:6380/2")).toBe("redis://default@cache.internal:6380/2");
    expect(redactUrl("cache.internal:6380?password=s3cret&db=2")).toBe("redis://cache.internal:6380?db=2");
  });

  it("names a Unix socket by its path, without a password given as a parameter", () => {
    expect(redactUrl("/run/redis/redis.sock?password=s3cret&db=2")).toBe("/run/redis/redis.sock?db=2");
    expect(redactUrl("/run/redis/redis.sock")).toBe("/run/redis/redis.sock");
  });

  it("shows none of a URL whose password ended early at an unencoded / ? or #: the rest of it follows the host", () => {
    // the user name is then read as the host and the password's first digits as its port
    for (const url of ["redis://default:2024/s3cret@cache.internal", "redis://default:2024?s3cret@cache.internal", "redis://default:2024#s3cret@cache.internal"]) {
      const shown = redactUrl(url);
      expect(shown, url).not.toMatch(/s3cret|2024/);
      expect(shown, url).toMatch(/percent-encode/);
    }
    // an @ in a password percent-encoded, or in a password parameter, is no such thing
    expect(redactUrl("redis://default:p%40ss%2Fw%3Fo%23rd@cache.internal")).toBe("redis://default@cache.internal");
    expect(redactUrl("redis://cache.internal?password=p@ss")).toBe("redis://cache.internal");
  });

  it("drops a fragment, which ioredis ignores and a password's tail may be", () => {
    expect(redactUrl("redis://cache.internal:6380#s3cret")).toBe("redis://cache.internal:6380");
  });
});
