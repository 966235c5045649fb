import { createAdmin, isAdminPath } from "./admin.ts";
import { canonicalPath, methodsOf } from "./canonical.ts";
import type { GateConfig } from "./config.ts";
import { createDecider } from "./decide.ts";
import { rateLimitHeaders } from "./headers.ts";
import { clientAddress, identify, readApiKey, type Identity } from "./identity.ts";
import { createMetrics } from "./metrics.ts";
import { prepare, send } from "./proxy.ts";
import { ambiguousKey, badGateway, blocked, forbidden, internalError, invalidPath, keyRequired, rateLimited, storeUnavailable } from "./responses.ts";
import { rulesFor, tierOf } from "./rules.ts";

export interface GateOptions {
  config: GateConfig;
  /** where admitted requests go; undefined: on to the request's own URL */
  origin?: URL;
  redisUrl: string;
  redisToken: string;
  /** enables the admin API under /__slidegate/ */
  adminToken?: string;
  /** a Workers Analytics Engine dataset: one data point per decision */
  metrics?: AnalyticsEngineDataset;
  /** the edge clock: sent to Redis with `clock: "edge"`, and the clock of the isolate's caches */
  now?: () => number;
  /** where structured log lines go (default: console) */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
}

export type Gate = (request: Request) => Promise<Response>;

/** Marks a response admitted only because the store failed and the rules fail open. */
export const FAIL_OPEN_HEADER = "X-Slidegate-Fail-Open";

/** The most of an unread upload the gate reads (and drops) before answering on its own. */
const DRAIN_LIMIT = 1 << 20;

/**
 * An answer of the gate's own (400, 401, 403, 429, 503) leaves the upload unread. Reading what
 * is still arriving, up to a limit, lets the client finish sending and read that answer, where
 * an unread upload can end in a connection reset; past the limit the rest is refused.
 */
async function discard(body: ReadableStream<Uint8Array>): Promise<void> {
  try {
    const reader = body.getReader();
    for (let read = 0; read <= DRAIN_LIMIT; ) {
      const { done, value } = await reader.read();
      if (done) return;
      read += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // a client that went away: nothing left to answer
  }
}

const defaultLog: NonNullable<GateOptions["log"]> = (level, line) => console[level](JSON.stringify(line));
const names = (rules: readonly { name: string }[]) => rules.map((r) => r.name);
const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Thrown when the origin cannot be reached: the one failure that is a 502. */
class OriginError extends Error {
  override name = "OriginError";
}

/**
 * The request path: canonical request → admin routes → client address and API key → deny
 * list → allow list → key required → tier and matching rules → one decision (block cache,
 * else one Redis call) → 403/429/503, or the origin's answer with rate-limit headers.
 * Everything that depends only on the configuration is settled here, once, so each request
 * runs straight through.
 *
 * Failures are kept apart: the origin unreachable is a 502, the store per the rules' fail
 * mode, and anything else — a bug — a logged 500 `internal-error`.
 *
 * @example
 * const gate = createGate({ config, origin: new URL("https://api.example.com"), redisUrl, redisToken });
 * const response = await gate(request);
 */
export function createGate(options: GateOptions): Gate {
  const { config } = options;
  const log = options.log ?? defaultLog;
  const record = createMetrics(options.metrics);
  const decide = createDecider({ config, redisUrl: options.redisUrl, redisToken: options.redisToken, now: options.now });
  const admin = createAdmin({
    config, adminToken: options.adminToken, redisUrl: options.redisUrl, redisToken: options.redisToken,
    now: options.now, log, forget: decide.forget,
  });
  const forwarding = { origin: options.origin, clientIpHeader: config.clientIpHeader, passForwardedHeaders: config.passForwardedHeaders };

  return async (request) => {
    // the body not yet handed on: whatever the gate answers itself, it drains this first
    const pending: { body: ReadableStream<Uint8Array> | null } = { body: request.body };
    let response: Response;
    try {
      response = await handle(request, pending);
    } catch (error) {
      if (error instanceof OriginError) {
        safeLog("error", { event: "slidegate.upstream_error", error: error.message });
        response = badGateway();
      } else {
        safeLog("error", { event: "slidegate.internal_error", error: message(error), stack: error instanceof Error ? error.stack : undefined });
        response = internalError();
      }
    }
    if (pending.body) await discard(pending.body);
    return response;
  };

  /** A log sink that throws must not turn a 500 into an unhandled exception. */
  function safeLog(level: "warn" | "error", line: Record<string, unknown>) {
    try {
      log(level, line);
    } catch {
      // nowhere left to report it
    }
  }

  async function forward(outbound: Request, pending: { body: unknown }, extra: Headers): Promise<Response> {
    // the origin reads the body now; a GET's body, not forwarded, is still drained
    if (outbound.body) pending.body = null;
    try {
      return await send(outbound, extra);
    } catch (error) {
      throw new OriginError(message(error), { cause: error });
    }
  }

  async function handle(request: Request, pending: { body: ReadableStream<Uint8Array> | null }): Promise<Response> {
    const url = new URL(request.url);
    const canonical = canonicalPath(url.pathname);
    if (!canonical.ok) return invalidPath(canonical.refused);
    const path = canonical.path;
    if (isAdminPath(path)) return await admin(request, path);

    const client = clientAddress(request, config.ipv6Prefix);
    const key = config.keyHeader ? readApiKey(request, config.keyHeader) : ({ kind: "absent" } as const);
    const identity: Identity = key.kind === "key" ? await identify("k", key.key) : await identify("i", client.bucket);
    const tier = tierOf(config, identity.keyHash);
    const tag = identity.tag;
    const listed = config.access(client.address, identity.keyHash);
    if (listed === "deny") {
      record({ outcome: "denylisted", tier, rules: [], tag });
      return forbidden();
    }
    if (key.kind === "ambiguous") return ambiguousKey(config.keyHeader!);

    // built before any quota is charged: a request the gate cannot send costs the caller nothing
    const outbound = prepare(request, { url, path, clientIp: client.text }, forwarding);
    pending.body = outbound.body ?? request.body;
    if (listed === "allow") {
      record({ outcome: "allowlisted", tier, rules: [], tag });
      return await forward(outbound, pending, new Headers());
    }
    if (key.kind !== "key" && config.keyRequired) return keyRequired(config.keyHeader!);

    const rules = rulesFor(config, tier, methodsOf(request, url), canonical.matchOn);
    if (rules.length === 0) return await forward(outbound, pending, new Headers());

    const verdict = await decide(identity, tier, rules);
    switch (verdict.kind) {
      case "failed": {
        const fail = verdict.closed ? "closed" : "open";
        log("error", { event: "slidegate.store_failure", fail, tier, rules: names(rules), method: request.method, path, error: verdict.error.message });
        record({ outcome: `failed-${fail}`, tier, rules: names(rules), tag });
        return verdict.closed ? storeUnavailable() : await forward(outbound, pending, new Headers({ [FAIL_OPEN_HEADER]: "store-unavailable" }));
      }
      case "blocked":
        record({ outcome: "blocked", tier, rules: [], tag, redisMs: verdict.redisMs, retryAfterMs: verdict.ms });
        log("warn", { event: "slidegate.blocked", tier, tag, blockedForMs: verdict.ms });
        return blocked(verdict.ms);
      case "denied": {
        const { decision, redisMs, elapsedMs } = verdict;
        const deniedBy = decision.limits.filter((l) => !l.shadow && l.retryMs !== 0).map((l) => l.name);
        record({ outcome: "denied", tier, rules: deniedBy, tag, redisMs, retryAfterMs: decision.retryAfterMs - elapsedMs });
        log("warn", { event: "slidegate.denied", tier, tag, rules: deniedBy, retryAfterMs: decision.retryAfterMs - elapsedMs, fromBlockCache: elapsedMs > 0 });
        return rateLimited(decision, elapsedMs);
      }
      case "admitted": {
        const { decision, redisMs } = verdict;
        const shadowDenied = decision.wouldDeny.length > 0;
        record({ outcome: shadowDenied ? "shadow-denied" : "admitted", tier, rules: shadowDenied ? decision.wouldDeny : names(rules), tag, redisMs });
        if (shadowDenied) log("warn", { event: "slidegate.shadow_denied", tier, tag, rules: decision.wouldDeny });
        return await forward(outbound, pending, rateLimitHeaders(decision));
      }
    }
  }
}
