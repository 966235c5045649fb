import { Redis } from "@upstash/redis/cloudflare";

/**
 * A REST client of the store as every part of the gate uses it: one call is one request (no
 * auto-pipelining, no retries, so a time budget is the whole budget), replies as Redis gave
 * them (a tier named "123" stays a name), no telemetry. `timeoutMs` bounds each call; a
 * signal function (not an AbortSignal) makes an abort throw instead of posing as a reply.
 *
 * @example
 * const redis = storeClient({ url, token, timeoutMs: 5000 });
 * await redis.hgetall("sg:{kAbc}:key");
 */
export function storeClient(options: { url: string; token: string; timeoutMs: number; plainJson?: boolean }): Redis {
  return new Redis({
    url: options.url,
    token: options.token,
    retry: { retries: 0 },
    signal: () => AbortSignal.timeout(options.timeoutMs),
    enableAutoPipelining: false,
    enableTelemetry: false,
    automaticDeserialization: false,
    // plain JSON replies skip decoding every string from base64: for replies known to be text
    ...(options.plainJson ? { responseEncoding: false as const } : {}),
  });
}
