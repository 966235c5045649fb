/**
 * The admitted floor of the gateway benchmark: one trivial REST call to the same shim through
 * @upstash/redis (EVALSHA of `return 1`, the shape of a gate's one decision without its
 * work), then the pass-through's proxying. A gate that makes one Redis call per admitted
 * request cannot add less latency than this. Built by the benchmark only; not part of slidegate.
 */
import { Redis } from "@upstash/redis/cloudflare";
import { proxy } from "./pass-through-worker.ts";

interface OneCallEnv {
  ORIGIN_URL: string;
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
}

const SCRIPT = "return 1";
const SHA1 = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"; // printf %s "return 1" | sha1sum

let redis: Redis | undefined;

export default {
  async fetch(request: Request, env: OneCallEnv): Promise<Response> {
    // the client settings slidegate uses: no retries, no auto-pipelining, no telemetry
    redis ??= new Redis({
      url: env.UPSTASH_REDIS_REST_URL,
      token: env.UPSTASH_REDIS_REST_TOKEN,
      retry: { retries: 0 },
      enableAutoPipelining: false,
      enableTelemetry: false,
      responseEncoding: false,
    });
    const client = redis;
    await client.evalsha(SHA1, [], []).catch((e: unknown) => {
      if (e instanceof Error && e.message.includes("NOSCRIPT")) return client.eval(SCRIPT, [], []);
      throw e;
    });
    return proxy(request, env.ORIGIN_URL);
  },
};
