import type { Step } from "../decision/pipeline.ts";
import type { Decision, LimitState } from "../script/limiter.ts";
import { PROBLEM_HEADERS, problem, problemBody } from "./problem.ts";
import { type HeaderFields, rateLimitFields, retryAfterSeconds } from "./rate-limit-headers.ts";

// The gate's own answers, each a problem+json with a stable type. None carries configuration or internal detail.

const keyRequired = (header: string) =>
  problem(401, "api-key-required", "API Key Required", `Send your API key in the ${header} header.`, { "WWW-Authenticate": 'Bearer realm="api"' });

const unknownKey = () =>
  problem(401, "unknown-api-key", "Unknown API Key", "This API key is not known to the gateway.", { "WWW-Authenticate": 'Bearer realm="api", error="invalid_token"' });

const disabledKey = () => problem(403, "api-key-disabled", "API Key Disabled", "This API key is disabled.");

const ambiguousKey = (header: string) =>
  problem(
    400,
    "ambiguous-api-key",
    "Ambiguous API Key",
    header.toLowerCase() === "authorization"
      ? `Send exactly one API key, once, in the ${header} header, as a scheme and a token (a repeated or comma-separated header, or more words, is refused).`
      : `Send exactly one API key, once, in the ${header} header (a repeated or comma-separated header is refused).`,
  );

export const invalidPath = (refused: string) => problem(400, "invalid-path", "Invalid Path", `The path contains ${refused}, which this gateway does not accept.`);

const forbidden = () => problem(403, "forbidden", "Forbidden", "This caller is on the deny list.");

const blocked = (ms: number) =>
  problem(403, "blocked", "Blocked", "This caller is blocked by the operator for now.", Number.isFinite(ms) ? { "Retry-After": retryAfterSeconds(ms) } : {});

const storeUnavailable = () => problem(503, "store-unavailable", "Service Unavailable", "The rate-limit store failed or did not answer in time.", { "Retry-After": "1" });

export const badGateway = () => problem(502, "bad-gateway", "Bad Gateway", "The origin could not be reached.");

export const originTimeout = () => problem(504, "origin-timeout", "Gateway Timeout", "The origin did not answer in time.");

export const incompleteBody = () => problem(400, "incomplete-body", "Incomplete Body", "The request body broke off before it was whole.");

export const internalError = () => problem(500, "internal-error", "Internal Error", "The gateway failed on this request; the operator can find it in the logs.");

export const configurationError = () =>
  problem(500, "configuration-error", "Gateway Misconfigured", "The gateway is misconfigured; the operator can find the details in the logs and with `npm run check-config`.");

/** A denial worked out for one set of whole seconds to wait: what the 429 and the library's headers are made of. */
interface DenialParts {
  /** the seconds the parts were worked out for: Retry-After, then every limit's reset */
  stamp: string;
  retryAfter: number;
  /** the rate-limit headers and Retry-After */
  fields: HeaderFields;
  /** the 429's headers: those and the problem+json ones (a Response copies them: shared safely) */
  response: Headers;
  /** the problem+json body, encoded once; workerd reads from these bytes without copying them, so they are never changed once made */
  body: Uint8Array;
}

/**
 * Denials answered from the denial cache repeat one decision: its parts are worked out once
 * for each second of its wait, not once per request. Held by the decision itself, so they go
 * when the cache lets the decision go.
 */
const denialParts = new WeakMap<Decision, DenialParts>();
const UTF8 = new TextEncoder();

/** A denial's answer, `elapsedMs` after its decision (a denial-cache answer) or fresh. */
function denial(decision: Decision, elapsedMs: number) {
  const wait = retryAfterSeconds(decision.retryAfterMs - elapsedMs);
  // every header is a whole number of seconds: parts with the same seconds are the same parts
  let stamp = wait;
  for (const l of decision.limits) stamp += `|${Math.ceil(Math.max(l.resetMs - elapsedMs, 0) / 1000)}`;
  let parts = denialParts.get(decision);
  if (parts?.stamp !== stamp) {
    const limits = elapsedMs !== 0 ? decision.limits.map((l) => ({ ...l, resetMs: Math.max(0, l.resetMs - elapsedMs) })) : decision.limits;
    const fields: HeaderFields = [...rateLimitFields({ ...decision, limits }), ["Retry-After", wait]];
    // a rule the request weighs more than (retry -1: a key's own limit below the rule's cost)
    // denies it too, and is named with the others; waiting does not help there
    const quoted = (ls: readonly LimitState[]) => ls.map((l) => `"${l.name}"`).join(", ");
    const names = quoted(limits.filter((l) => !l.shadow && l.retryMs !== 0));
    const never = limits.filter((l) => !l.shadow && l.retryMs < 0);
    const detail = never.length
      ? `Rate limit ${names} exceeded; this request weighs more than ${quoted(never)} admit${never.length > 1 ? "" : "s"} in a whole window.`
      : `Rate limit ${names} exceeded; retry in ${wait} s.`;
    parts = {
      stamp,
      retryAfter: Number(wait),
      fields,
      response: new Headers([...fields, ...PROBLEM_HEADERS]),
      body: UTF8.encode(problemBody(429, "rate-limited", "Too Many Requests", detail)),
    };
    denialParts.set(decision, parts);
  }
  const { fields, response, body, retryAfter } = parts;
  return { fields, retryAfter, respond: () => new Response(body, { status: 429, headers: response }) };
}

/** Marks a request let through only because the store failed and its rules fail open. */
export const FAIL_OPEN_HEADER = "X-Slidegate-Fail-Open";

export type Reason =
  | "admitted"
  | "rate-limited"
  | "blocked"
  | "failed-open"
  | "failed-closed"
  | "no-rule"
  | "allowlisted"
  | "denylisted"
  | "ambiguous-key"
  | "key-required"
  | "unknown-key"
  | "disabled-key";

/** What a step of the pipeline means over HTTP. */
export type Answer =
  /** go on (to the origin, or to the application's handler), with these header fields on the response */
  | { pass: true; reason: Reason; fields: Readonly<HeaderFields>; decision?: Decision }
  /** the gate's own answer; `fields` are its rate-limit headers, for a response of the application's own */
  | { pass: false; reason: Reason; fields: Readonly<HeaderFields>; decision?: Decision; retryAfter?: number; response: () => Response };

const NO_FIELDS: Readonly<HeaderFields> = Object.freeze([]);

/**
 * The one way from a step of the pipeline to HTTP, for the gateway and the library alike.
 *
 * @example
 * const a = answer(await pipeline.run(request, match), "x-api-key");
 * if (!a.pass) return a.response();
 */
export function answer(step: Step, keyHeader = "X-API-Key"): Answer {
  switch (step.kind) {
    case "no-rule":
      return { pass: true, reason: "no-rule", fields: NO_FIELDS };
    case "allowlisted":
      return { pass: true, reason: "allowlisted", fields: NO_FIELDS };
    case "denylisted":
      return { pass: false, reason: "denylisted", fields: NO_FIELDS, response: forbidden };
    case "ambiguous-key":
      return { pass: false, reason: "ambiguous-key", fields: NO_FIELDS, response: () => ambiguousKey(keyHeader) };
    case "key-required":
      return { pass: false, reason: "key-required", fields: NO_FIELDS, response: () => keyRequired(keyHeader) };
    case "unknown-key":
      return { pass: false, reason: "unknown-key", fields: NO_FIELDS, response: unknownKey };
    case "disabled-key":
      return { pass: false, reason: "disabled-key", fields: NO_FIELDS, response: disabledKey };
  }
  const { verdict } = step;
  switch (verdict.kind) {
    case "admitted":
      return { pass: true, reason: "admitted", fields: rateLimitFields(verdict.decision), decision: verdict.decision };
    case "denied": {
      const { fields, retryAfter, respond } = denial(verdict.decision, verdict.elapsedMs);
      return { pass: false, reason: "rate-limited", fields, decision: verdict.decision, retryAfter, response: respond };
    }
    case "blocked": {
      // the wait goes into the fields too, as for every other refusal that has one: an
      // application that answers with a response of its own copies them
      if (!Number.isFinite(verdict.ms)) return { pass: false, reason: "blocked", fields: NO_FIELDS, response: () => blocked(verdict.ms) };
      const wait = retryAfterSeconds(verdict.ms);
      return { pass: false, reason: "blocked", fields: [["Retry-After", wait]], retryAfter: Number(wait), response: () => blocked(verdict.ms) };
    }
    case "failed":
      // shadow rules alone (no registry entry) admit whatever the store does: nothing to mark
      if (verdict.shadowOnly) return { pass: true, reason: "admitted", fields: NO_FIELDS };
      return verdict.closed
        ? { pass: false, reason: "failed-closed", fields: [["Retry-After", "1"]], retryAfter: 1, response: storeUnavailable }
        : { pass: true, reason: "failed-open", fields: [[FAIL_OPEN_HEADER, "store-unavailable"]] };
  }
}
