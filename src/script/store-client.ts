import { errors, Redis } from "@upstash/redis/cloudflare";

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
  return checkingReplies(
    new Redis({
      url: options.url,
      token: options.token,
      retry: { retries: 0 },
      signal: () => starting ?? AbortSignal.timeout(options.timeoutMs),
      enableAutoPipelining: false,
      enableTelemetry: false,
      automaticDeserialization: false,
      // plain JSON replies skip decoding every string from base64: for replies known to be text
      ...(options.plainJson ? { responseEncoding: false as const } : {}),
    }),
  );
}

/** One command's answer as the REST API frames it: an error (its text), or a result (null for nil). */
const framed = (reply: unknown) => {
  if (typeof reply !== "object" || reply === null || Array.isArray(reply)) return false;
  const { error, result } = reply as { error?: unknown; result?: unknown };
  // an error of another kind (an object, as an API gateway words one) would be logged as "[object Object]"
  return error ? typeof error === "string" : result !== undefined;
};

/**
 * What a store's error answer (status 400 and up) says, when it names no error as the REST API
 * does (`{"error": "…"}`): the client would log `${body.error}` of it, "undefined" for a
 * gateway's `{"message": "Forbidden"}` and "[object Object]" for `{"error": {"message": …}}`,
 * and never its status. Undefined when it names one, or is no JSON (the client quotes that body).
 */
async function unnamedError(res: Response): Promise<string | undefined> {
  const text = await res.clone().text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const error = typeof body === "object" && body !== null ? (body as { error?: unknown }).error : undefined;
  if (typeof error === "string" && error !== "") return undefined;
  // shown as JSON.stringify writes it, not as the store's own JSON did: a gateway's escapes
  // (PHP's \/, Python's \u00e9, Go's \u003c) would hide a token it quotes back from the
  // failure log, which takes a token out in the forms JSON.stringify gives it
  return `the store answered status ${res.status} without an error named as the REST API names one: ${JSON.stringify(body).slice(0, 200)}`;
}

/** The part of the client's requester a store call goes through (a protected field of `Redis`). */
interface Requester {
  request(req: { path?: string[]; body?: unknown }): Promise<unknown>;
}

/**
 * `redis` with every reply checked for the frame the REST API gives it (`{"result": …}` or
 * `{"error": …}`; a pipeline, an array of those, one per command) before the client reads it.
 * The client reads any other frame with a TypeError of its own ("Request did not return a
 * result", "n.map is not a function"), which is what a bug in the gate throws: a store, or a
 * proxy in front of it, that answers `{}` or `[]` would make the admin API answer a logged 500
 * internal error. An UpstashError is a store failure, as every caller handles one.
 */
function checkingReplies(redis: Redis): Redis {
  const requester = (redis as unknown as { client: Requester }).client;
  const request = requester.request.bind(requester);
  requester.request = async (req) => {
    let reply: unknown;
    try {
      reply = await unredirected(() => request(req));
    } catch (e) {
      if (e instanceof TypeError && !(e instanceof DOMException)) {
        // Node's fetch fails to connect with a TypeError ("fetch failed") whose cause says why
        // (ECONNREFUSED, ENOTFOUND): no reply was had, and the line must say so, not that one
        // could not be read
        const cause = (e as { cause?: { code?: unknown; message?: unknown } }).cause;
        if (cause !== undefined && cause !== null) {
          const why = typeof cause.code === "string" ? cause.code : typeof cause.message === "string" ? cause.message : undefined;
          throw new errors.UpstashError(`the store could not be reached: ${e.message}${why ? ` (${why})` : ""}`, { cause: e });
        }
        // the client's own reading of a reply it got (a JSON null, read for its result)
        throw new errors.UpstashError(`the store's reply could not be read: ${e.message}`, { cause: e });
      }
      throw e;
    }
    const commands = req.path?.some((part) => part === "pipeline" || part === "multi-exec") && Array.isArray(req.body) ? req.body.length : undefined;
    const fits = commands === undefined ? framed(reply) : Array.isArray(reply) && reply.length === commands && reply.every(framed);
    if (!fits) throw new errors.UpstashError(`the store's reply is not framed as the REST API frames one: ${JSON.stringify(reply)?.slice(0, 200)}`);
    return reply;
  };
  return redis;
}

/**
 * `request` (the client's own, which calls the global fetch in its first turn, with no way to
 * say how redirects go) with a fetch that follows none. A followed redirect would send the
 * call, keys and arguments, to whatever host a proxy in front of the store names, and take
 * that host's answer as the store's: an admission or a denial nobody's rules made. A redirect
 * is a store failure, handled as any other. Swapped and restored in one turn, as `within`
 * hands its signal over: no other code runs in between.
 */
function unredirected(request: () => Promise<unknown>): Promise<unknown> {
  const global = globalThis as { fetch: typeof fetch };
  const following = global.fetch;
  let called = false;
  global.fetch = async (input, init) => {
    called = true;
    const res = await following(input, { ...init, redirect: "manual" });
    if (res.status >= 300 && res.status < 400) {
      await res.body?.cancel();
      throw new errors.UpstashError(`the store answered a redirect (status ${res.status}), which the gate does not follow`);
    }
    const unnamed = res.ok ? undefined : await unnamedError(res);
    if (unnamed !== undefined) {
      await res.body?.cancel();
      throw new errors.UpstashError(unnamed);
    }
    return res;
  };
  let pending: Promise<unknown>;
  try {
    pending = request();
  } finally {
    global.fetch = following;
  }
  // a client that no longer fetches in its first turn would follow redirects again, unseen
  if (!called) throw new errors.UpstashError("the store client did not call fetch as the gate expects: no call was made");
  return pending;
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
