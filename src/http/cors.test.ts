import { describe, expect, it } from "vitest";
import { parseRateLimits } from "../config/rate-limits.ts";
import { answer } from "./answers.ts";
import { corsForAnswers, exposeGateFields } from "./cors.ts";
import { rateLimitFields } from "./rate-limit-headers.ts";

const limits = [{ name: "minute", limit: 10, windowMs: 60_000, remaining: 0, resetMs: 30_000, retryMs: 30_000, shadow: false }];
const FIELDS = rateLimitFields({ admitted: true, limits, wouldDeny: [], retryAfterMs: 0 } as never);
const NAMES = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"];

const exposed = (origin: Record<string, string>, fields = FIELDS) => {
  const headers = new Headers(origin);
  exposeGateFields(headers, fields);
  return headers.get("access-control-expose-headers");
};

describe("exposeGateFields (the origin's answer, opened to a site by the origin)", () => {
  it("lists the gate's rate-limit headers after what the origin exposes", () => {
    expect(exposed({ "access-control-allow-origin": "https://app.example", "access-control-expose-headers": "X-Request-Id" })).toBe(`X-Request-Id, ${NAMES.join(", ")}`);
    expect(exposed({ "access-control-allow-origin": "https://app.example" })).toBe(NAMES.join(", "));
    expect(exposed({ "access-control-allow-origin": "https://app.example", "access-control-expose-headers": " " })).toBe(NAMES.join(", "));
  });

  it("adds no name the origin exposes already, in any case, and leaves the header alone when it exposes them all", () => {
    expect(exposed({ "access-control-allow-origin": "*", "access-control-expose-headers": "x-ratelimit-remaining,RATELIMIT , X-Request-Id" })).toBe(
      "x-ratelimit-remaining,RATELIMIT , X-Request-Id, X-RateLimit-Limit, X-RateLimit-Reset, RateLimit-Policy",
    );
    const all = `ratelimit-policy, ${NAMES.join(", ").toLowerCase()}`;
    expect(exposed({ "access-control-allow-origin": "*", "access-control-expose-headers": all })).toBe(all);
  });

  it("appends the names beside a wildcard, which covers only requests without credentials", () => {
    expect(exposed({ "access-control-allow-origin": "*", "access-control-expose-headers": "*" })).toBe(`*, ${NAMES.join(", ")}`);
  });

  it("leaves an answer the origin opened to no site alone, and exposes none of the gate's X-Slidegate-* reports", () => {
    expect(exposed({ "content-type": "text/plain" })).toBeNull();
    expect(exposed({ "access-control-allow-origin": "https://app.example" }, [["X-Slidegate-Fail-Open", "store-unavailable"]])).toBeNull();
    expect(exposed({ "access-control-allow-origin": "https://app.example" }, [["X-Slidegate-Shadow", '"m";r=1;t=1'], ...FIELDS])).toBe(NAMES.join(", "));
  });
});

describe("corsForAnswers (the gate's own answers)", () => {
  const config = (cors: unknown) => {
    const r = parseRateLimits({ rules: [{ name: "m", limit: 1, window: "1s" }], cors });
    if (!r.ok) throw new Error(r.errors.join("; "));
    return r.config.cors;
  };
  const problem = () => new Response(null, { status: 429, headers: { "Retry-After": "3" } });
  const opened = (cors: unknown, headers: Record<string, string>) => {
    const open = corsForAnswers(config(cors))!;
    return Object.fromEntries(open(new Request("https://gate.example/", { headers }), problem()).headers);
  };
  const EXPOSE = { "access-control-expose-headers": "Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset" };

  it("is nothing without a configuration", () => {
    expect(corsForAnswers(undefined)).toBeUndefined();
  });

  it("echoes an allowed origin, varies by Origin, and exposes Retry-After and the rate-limit headers", () => {
    expect(opened({ origins: ["https://app.example", "https://b.example"] }, { origin: "https://app.example" })).toEqual({
      "access-control-allow-origin": "https://app.example",
      vary: "Origin",
      "retry-after": "3",
      ...EXPOSE,
    });
    expect(opened({ origins: ["https://APP.example"], credentials: true }, { origin: "https://app.example" })).toMatchObject({
      "access-control-allow-origin": "https://app.example",
      "access-control-allow-credentials": "true",
    });
  });

  it('answers "*" to every Origin, "null" included, when configured "*"', () => {
    for (const origin of ["https://any.example", "null", "https://x.example, https://y.example"]) {
      expect(opened({ origins: ["*"] }, { origin }), origin).toEqual({ "access-control-allow-origin": "*", "retry-after": "3", ...EXPOSE });
    }
  });

  it("adds nothing for a request without an Origin or with one not in the list exactly as browsers send it", () => {
    const cors = { origins: ["https://app.example.com"], credentials: true };
    for (const origin of [
      "https://app.example.com/",
      "https://APP.example.com",
      "http://app.example.com",
      "https://app.example.com:443",
      "https://app.example.com.evil.net",
      "https://evil-app.example.com",
      "https://evilapp.example.com",
      "https://user@app.example.com",
      "https://app.example.com/path",
      "https://app.example.com, https://app.example.com",
      "null",
      "*",
      `https://app.example.com${"a".repeat(60_000)}`,
    ]) {
      expect(opened(cors, { origin }), origin).toEqual({ "retry-after": "3" });
    }
    expect(opened(cors, {})).toEqual({ "retry-after": "3" });
  });

  it("lists every header a 429 carries but its problem+json ones among those exposed", () => {
    const decision = { admitted: false, limits, wouldDeny: [], retryAfterMs: 30_000 };
    const denied = answer({ kind: "decided", caller: {}, rules: [], verdict: { kind: "denied", decision, elapsedMs: 0, fromCache: false } } as never);
    const names = [...(denied as { response: () => Response }).response().headers.keys()].filter((n) => n !== "content-type" && n !== "cache-control");
    const listed = EXPOSE["access-control-expose-headers"].toLowerCase().split(", ");
    expect(names.sort()).toEqual([...listed].sort());
  });
});
