import { Redis } from "@upstash/redis/cloudflare";

/** The signal of the call `within` is starting right now; the client reads it as the call starts. */
let starting: AbortSignal | undefined;

/**
 * A REST client of the store as every part of the gate uses it: one call is one request (no
 * auto-pipelining, no retries, so a time budget is the whole budget), replies as Redis gave
 * them (a tier named "123" stays a name), no telemetry. Every call is bounded: by `within`'s
 * budget when made through it, otherwise by `timeoutMs`. A signal function (not an
 * AbortSignal) makes an abort throw instead of posing as a reply.
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
    signal: () => starting ?? AbortSignal.timeout(options.timeoutMs),
    enableAutoPipelining: false,
    enableTelemetry: false,
    automaticDeserialization: false,
    // plain JSON replies skip decoding every string from base64: for replies known to be text
    ...(options.plainJson ? { responseEncoding: false as const } : {}),
  });
}

/**
 * Runs `call` (one call of a `storeClient`) within `timeoutMs`, with a timer that is cleared
 * as soon as the store answers. `AbortSignal.timeout` would leave every call's timer to fire
 * later for nothing — on a busy isolate, one wake-up per decision, a tenth of what the gate
 * spends on an admitted request. The client takes the signal while the call starts, in the
 * same turn; a call that took it later would fall back to its client's own `timeoutMs`, so no
 * call is ever unbounded. `call` starts exactly one store call: a second one started in the
 * same turn would share this signal, and lose its bound when this timer is cleared.
 *
 * @example
 * const reply = await within(1000, () => redis.evalsha(sha, keys, args));
 */
export async function within<T>(timeoutMs: number, call: () => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException(`Timed out: the store did not answer within ${timeoutMs} ms.`, "TimeoutError")), timeoutMs);
  try {
    let pending: Promise<T>;
    starting = controller.signal;
    try {
      pending = call();
    } finally {
      starting = undefined;
    }
    return await pending;
  } finally {
    clearTimeout(timer);
  }
}
