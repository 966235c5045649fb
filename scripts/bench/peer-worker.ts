/**
 * The peer in the gateway benchmark: the same job done the common way, with
 * @upstash/ratelimit's slidingWindow in front of the same origin, on the same shim and Redis.
 * Built by the benchmark only; not part of slidegate.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis/cloudflare";

interface PeerEnv {
  ORIGIN_URL: string;
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
  LIMIT: string;
  PREFIX: string;
}

let limiter: Ratelimit | undefined;

export default {
  async fetch(request: Request, env: PeerEnv): Promise<Response> {
    limiter ??= new Ratelimit({
      redis: new Redis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, enableTelemetry: false }),
      limiter: Ratelimit.slidingWindow(Number(env.LIMIT), "1 h"),
      prefix: env.PREFIX,
    });
    const { success, limit, remaining, reset } = await limiter.limit(request.headers.get("cf-connecting-ip") ?? "anonymous");
    const headers = { "X-RateLimit-Limit": String(limit), "X-RateLimit-Remaining": String(remaining), "X-RateLimit-Reset": String(reset) };
    if (!success) return new Response("Too Many Requests", { status: 429, headers });
    const url = new URL(request.url);
    const upstream = await fetch(env.ORIGIN_URL + url.pathname + url.search, { method: request.method, headers: request.headers, body: request.body });
    const response = new Response(upstream.body, upstream);
    for (const [k, v] of Object.entries(headers)) response.headers.set(k, v);
    return response;
  },
};
