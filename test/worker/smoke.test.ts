import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";

const services = JSON.parse(env.TEST_SERVICES);

describe("Worker to shim", () => {
  it("runs a script by EVALSHA through @upstash/redis/cloudflare", async () => {
    const redis = new Redis({ url: services.shimUrl, token: services.shimToken });
    const script = redis.createScript<number[]>("return {tonumber(ARGV[1]) * 2, #KEYS}");
    const sha = await redis.scriptLoad("return {tonumber(ARGV[1]) * 2, #KEYS}");
    expect(await redis.evalsha(sha, ["smoke:a", "smoke:b"], ["21"])).toEqual([42, 2]);
    expect(await script.exec(["smoke:c"], ["5"])).toEqual([10, 1]);
  });
});
