import { createAdmin, isAdminPath } from "../admin/admin.ts";
import type { GateConfig } from "../config/rate-limits.ts";
import { storeFailureOf } from "../decision/decide.ts";
import { clientAddress } from "../decision/identity.ts";
import { createPipeline, type Step } from "../decision/pipeline.ts";
import { answer, badGateway, incompleteBody, internalError, invalidPath, originTimeout } from "../http/answers.ts";
import { canonicalPath, methodsOf, OVERRIDE_HEADERS } from "../http/canonical.ts";
import { corsForAnswers } from "../http/cors.ts";
import { matchPaths } from "../http/query-routes.ts";
import type { HeaderFields } from "../http/rate-limit-headers.ts";
import { createDenialLog, type TurnedAway } from "./denial-log.ts";
import { createFailureLog } from "./failure-log.ts";
import { createLiveFigures } from "./live-figures.ts";
import { createMetrics, type Outcome } from "./metrics.ts";
import { ClientAbort, createForwarder, OriginError, OriginTimeout } from "./proxy.ts";
import { createQuietFlush } from "./quiet-flush.ts";

export interface GateOptions {
  config: GateConfig;
  /** where admitted requests go; undefined: on to the request's own URL */
  origin?: URL;
  redisUrl: string;
  redisToken: string;
  /** enables the admin API under /__slidegate/ */
  adminToken?: string;
  /** an admin token was set but refused (too short, or one no header can carry): every admin path answers the configuration error */
  adminRefused?: boolean;
  /** a Workers Analytics Engine dataset: data points of the gate's decisions */
  metrics?: AnalyticsEngineDataset;
  /** the edge clock: sent to Redis with `clock: "edge"`, and the clock of the isolate's caches and denial log */
  now?: () => number;
  /** where structured log lines go (default: console) */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
  /** the least time between two flushes of the console's live figures (kept with the admin API on) */
  figuresIntervalMs?: number;
  /** how long a response's background waits for a later request before writing the summaries it left (src/gateway/quiet-flush.ts) */
  quietFlushMs?: number;
}

/** The part of a Worker's ExecutionContext the gate uses: work that may finish after the response. */
export interface Background {
  waitUntil(promise: Promise<unknown>): void;
}

export type Gate = (request: Request, ctx?: Background) => Promise<Response>;

/** What a request's method is matched as when no rule names methods: nothing reads it. */
const UNREAD_METHODS: readonly string[] = [];

/** An Expect header asking for 100 Continue (its one defined expectation, in any case). */
const EXPECTS_CONTINUE = /^\s*100-continue\s*$/i;

/** The longest path an origin_timeout line carries, as the failure log cuts every text it writes. */
const LOGGED_PATH = 300;

/** The most of an unread upload the gate reads (and drops) after answering on its own. */
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

/**
 * `response`, sent at once while `body` is drained (see `discard`), as nginx answers and then
 * reads what is left of the request ("lingering close"): an answer sent only once the upload
 * was drained would never reach a client that sends more only once it is answered (an
 * interactive upload). The answer is held open, its length told, so the client has it whole
 * while the runtime still lets the request's body be read, which it does not once the answer
 * is over.
 */
async function answerWhileDraining(response: Response, body: ReadableStream<Uint8Array>, method: string): Promise<Response> {
  const drained = discard(body);
  // an answer with no body on the wire (a HEAD's) is over once sent: drained first, as before
  if (response.body === null || method === "HEAD") {
    await drained;
    return response;
  }
  const bytes = new Uint8Array(await response.arrayBuffer());
  const { readable, writable } = new FixedLengthStream(bytes.byteLength);
  const writer = writable.getWriter();
  // a client gone before its answer was sent fails the write: nothing left to answer
  Promise.all([writer.write(bytes), drained]).then(
    () => writer.close().catch(() => {}),
    () => writer.abort().catch(() => {}),
  );
  return new Response(readable, response);
}

const defaultLog: NonNullable<GateOptions["log"]> = (level, line) => console[level](JSON.stringify(line));
const names = (rules: readonly { name: string }[]) => rules.map((r) => r.name);
const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/**
 * The gateway: the canonical request, the admin routes, then the request pipeline (caller,
 * lists, rules, one decision: src/decision/pipeline.ts) and its answer (src/http/answers.ts),
 * and for a request that passes, the origin (src/gateway/proxy.ts). Everything that depends
 * only on the configuration is settled here, once, so each request runs straight through.
 *
 * Failures are kept apart: the origin unreachable is a 502, one that does not answer within
 * `originTimeout` a 504, the store per the rules' fail mode, a client's upload that broke off a
 * 400 logged as the client's (a warning, not an error), and anything else — a bug — a logged
 * 500 `internal-error`. Denials are logged per
 * identity, not per request (src/gateway/denial-log.ts), so a flood costs log lines in
 * proportion to its callers, not its requests.
 *
 * @example
 * const gate = createGate({ config, origin: new URL("https://api.example.com"), redisUrl, redisToken });
 * const response = await gate(request, ctx);
 */
export function createGate(options: GateOptions): Gate {
  const { config } = options;
  const log = options.log ?? defaultLog;
  const record = createMetrics(options.metrics);
  const pipeline = createPipeline({ config, redisUrl: options.redisUrl, redisToken: options.redisToken, now: options.now });
  // the admin API's store failures, counted apart from the requests' but written by the same quiet flush
  const adminFailures = createFailureLog({ event: "slidegate.admin_store_failure", now: options.now, secret: options.redisToken, write: (line) => safeLog("error", line) });
  const admin = createAdmin({
    config,
    adminToken: options.adminToken,
    refused: options.adminRefused,
    redisUrl: options.redisUrl,
    redisToken: options.redisToken,
    now: options.now,
    log,
    forget: pipeline.forget,
    failures: adminFailures,
  });
  const denials = createDenialLog({
    now: options.now,
    write: (line) => {
      safeLog("warn", line);
      // the summaries carry the exact counts: one data point per identity (and one per outcome for the rest), weighted by them
      const count = Number(line.denied ?? line.blocked ?? line.refused);
      const point = { tier: String(line.tier ?? ""), tag: String(line.tag ?? ""), count };
      if (line.event === "slidegate.denied_summary") {
        // in one spelling whichever rule denied first (the per-rule counts are in the line)
        const rules = Object.keys((line.rules as Record<string, number> | undefined) ?? {}).sort();
        record({ ...point, outcome: "denied", rules });
      } else if (line.event === "slidegate.blocked_summary") {
        const left = line.blockedForMs;
        record({ ...point, outcome: "blocked", rules: [], blockedForMs: typeof left === "number" ? left : undefined });
      } else if (line.event === "slidegate.refused_summary") {
        record({ ...point, outcome: line.reason as TurnedAway, rules: [] });
      }
    },
  });
  // a store outage fails every request alike: a full line per interval, the rest counted
  const failures = createFailureLog({ event: "slidegate.store_failure", now: options.now, secret: options.redisToken, write: (line) => safeLog("error", line) });
  // the last request of a burst is followed by none that would write its summaries
  const quiet = createQuietFlush({
    now: options.now,
    waitMs: options.quietFlushMs,
    flush: () => {
      failures.flush();
      adminFailures.flush();
      return denials.flush();
    },
  });
  // the console's figures: counted in memory, flushed after responses (src/gateway/live-figures.ts)
  const figures = options.adminToken
    ? createLiveFigures({ redisUrl: options.redisUrl, redisToken: options.redisToken, prefix: config.prefix, now: options.now, intervalMs: options.figuresIntervalMs })
    : undefined;
  // an origin behind CGI (PHP, WSGI, Rack) reads X_API_Key or X_HTTP_Method_Override as the header
  // the gate read (or did not): those spellings never reach it
  const respelled = [...(config.keyHeader ? [config.keyHeader] : []), ...OVERRIDE_HEADERS];
  const toOrigin = createForwarder({
    origin: options.origin,
    clientIpHeader: config.clientIpHeader,
    passForwardedHeaders: config.passForwardedHeaders,
    respelled,
    originTimeoutMs: config.originTimeoutMs,
  });
  // the method (and its override headers) is read only when some rule asks for it
  const byMethod = [...config.tiers.values(), config.addressRules].some((rules) => rules.some((r) => r.methods));
  // CORS on the gate's own answers: undefined unless configured, so they cost nothing then
  const cors = corsForAnswers(config.cors);
  const own = (request: Request, response: Response) => (cors ? cors(request, response) : response);

  return async (request, ctx) => {
    // the body not yet handed on: whatever the gate answers itself, it drains this while its answer goes out
    const pending: { body: ReadableStream<Uint8Array> | null } = { body: request.body };
    let response: Response;
    try {
      response = await handle(request, pending);
    } catch (error) {
      if (error instanceof OriginError) {
        safeLog("error", { event: "slidegate.upstream_error", error: error.message });
        response = own(request, badGateway());
      } else {
        safeLog("error", { event: "slidegate.internal_error", error: message(error), stack: error instanceof Error ? error.stack : undefined });
        response = own(request, internalError());
      }
    }
    // a client that asked to be told before it sends its body (Expect: 100-continue) has sent
    // none: it takes this answer in place of 100 Continue, which workerd never sends, and
    // sends nothing (RFC 9110 §10.1.1); draining would wait for a body that is not coming.
    // A body the gate's own code read (the admin API's) is no upload left unread.
    if (pending.body && !pending.body.locked && !EXPECTS_CONTINUE.test(request.headers.get("expect") ?? ""))
      response = await answerWhileDraining(response, pending.body, request.method);
    if (failures.due()) failures.flush();
    if (denials.due()) {
      if (ctx) ctx.waitUntil(denials.flush());
      else await denials.flush();
    }
    if (ctx && (denials.pending || failures.pending || adminFailures.pending)) quiet.schedule(ctx);
    if (ctx) figures?.schedule(ctx);
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

  async function forward(outbound: Request, pending: { body: unknown }, extra: Readonly<HeaderFields>, asked: URL): Promise<Response> {
    // the origin reads the body now: the gate no longer drains it
    if (outbound.body) pending.body = null;
    return await toOrigin.send(outbound, extra, asked);
  }

  /** The log line and data point a step earns; a denial goes to the denial log instead of a line per request. */
  function report(step: Step, request: Request, path: string) {
    figures?.record(step);
    const {
      tier,
      identity: { tag },
    } = step.caller;
    const point = (outcome: Outcome, rules: readonly string[] = [], extra: { redisMs?: number; tag?: string } = {}) => record({ outcome, tier, rules, tag, ...extra });
    if (step.kind === "allowlisted") return point("allowlisted");
    if (step.kind === "no-rule") return;
    // turned away before any rule: counted per identity, a data point per summary; a key nobody
    // knows as its address, so a flood of made-up keys is one identity the operator can act on
    if (step.kind !== "decided") {
      // the address rules' call beside the key's refusal failed: no outcome changed ("refused")
      if ((step.kind === "unknown-key" || step.kind === "disabled-key") && step.addressFailure) {
        failures.record({ fail: "refused", tier, rules: names(step.addressFailure.rules), method: request.method, path, error: step.addressFailure.error.message });
      }
      return denials.record({ outcome: step.kind, tag: step.kind === "unknown-key" ? step.address.tag : tag, tier, rules: [] });
    }
    const { verdict, rules } = step;
    // a failure of shadow rules alone ("shadow") changed no outcome, and is logged all the same
    const failure = storeFailureOf(verdict, rules);
    if (failure) failures.record({ fail: failure.fail, tier, rules: names(failure.rules), method: request.method, path, error: failure.error.message });
    switch (verdict.kind) {
      case "failed":
        // shadow rules alone: admitted as they always would be (no latency: no answer came)
        if (verdict.shadowOnly) return point("failed-shadow", names(rules));
        return point(verdict.closed ? "failed-closed" : "failed-open", names(rules));
      case "blocked":
        // like denials: a line per identity, counted summaries (and their data points) per interval
        denials.record({ outcome: "blocked", tag: verdict.by?.tag ?? tag, tier, rules: [], detail: { blockedForMs: Number.isFinite(verdict.ms) ? verdict.ms : null } });
        return;
      case "denied": {
        const { decision, elapsedMs, fromCache } = verdict;
        const deniedBy = decision.limits.filter((l) => !l.shadow && l.retryMs !== 0);
        denials.record({ tag: verdict.by?.tag ?? tag, tier, rules: deniedBy, detail: { retryAfterMs: decision.retryAfterMs - elapsedMs, fromDenialCache: fromCache } });
        return;
      }
      case "admitted": {
        const { decision, redisMs } = verdict;
        if (decision.wouldDeny.length === 0) return point("admitted", names(rules), { redisMs });
        // like denials: a line per identity, rule and window, counted summaries (the data point stays per request)
        const by = verdict.by?.tag ?? tag;
        denials.record({ outcome: "shadow-denied", tag: by, tier, rules: decision.limits.filter((l) => l.shadow && l.retryMs !== 0) });
        return point("shadow-denied", decision.wouldDeny, { redisMs, tag: by });
      }
    }
  }

  async function handle(request: Request, pending: { body: ReadableStream<Uint8Array> | null }): Promise<Response> {
    const url = new URL(request.url);
    const canonical = canonicalPath(url.pathname);
    if (!canonical.ok) return own(request, invalidPath(canonical.refused));
    const path = canonical.path;
    // any form: an origin that drops `;` parameters or trailing dots would route "/__slidegate;x/usage" as the gate's own
    const adminPath = canonical.matchOn.find(isAdminPath);
    if (adminPath !== undefined) return await admin(request, adminPath);

    const client = clientAddress(request, config.ipv6Prefix);
    // its path's forms, and those of a path its query routes to (`?rest_route=`, a front script's `?q=`): src/http/query-routes.ts
    const paths = matchPaths(url.search, canonical.matchOn);
    const step = await pipeline.run(request, { methods: byMethod ? methodsOf(request, url) : UNREAD_METHODS, paths }, { client });
    report(step, request, path);
    const answered = answer(step, config.keyHeader);
    if (!answered.pass) return own(request, answered.response());
    // built only for a request that goes on: a flood of denials builds none. It is made of
    // what the runtime has accepted already (method, headers) and the canonical path.
    try {
      return await forward(toOrigin.prepare(request, { url, path, clientIp: client.text }), pending, answered.fields, url);
    } catch (error) {
      if (error instanceof OriginTimeout) {
        // the origin's failure (an error line, as upstream_error is), said apart from one it
        // could not be reached by: the time limit, and which route was slow. No origin address:
        // the path is the client's, as the store failure lines carry it
        safeLog("error", {
          event: "slidegate.origin_timeout",
          tier: step.caller.tier,
          tag: step.caller.identity.tag,
          method: request.method,
          path: path.length > LOGGED_PATH ? `${path.slice(0, LOGGED_PATH)}…` : path,
          originTimeoutMs: error.limitMs,
        });
        return own(request, originTimeout());
      }
      if (!(error instanceof ClientAbort)) throw error;
      // the client's doing, which any caller can repeat at will: no error line to alert on, and
      // who it was (already charged: it was admitted). Its answer reaches a client that only
      // closed its sending side; one that hung up reads none.
      safeLog("warn", { event: "slidegate.client_aborted", tier: step.caller.tier, tag: step.caller.identity.tag, error: error.message });
      return own(request, incompleteBody());
    }
  }
}
