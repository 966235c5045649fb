/**
 * RFC 9457 problem details: every answer the gate gives itself (as opposed to the
 * origin's) is `application/problem+json` with a stable `type`.
 *
 * @example
 * problem(429, "rate-limited", "Too Many Requests", "Limit \"minute\" allows 10 per 60 s.");
 */
export function problem(status: number, type: string, title: string, detail: string, headers?: HeadersInit): Response {
  const h = new Headers(headers);
  for (const [name, value] of PROBLEM_HEADERS) h.set(name, value);
  return new Response(problemBody(status, type, title, detail), { status, headers: h });
}

/** The headers every problem answer carries. */
export const PROBLEM_HEADERS: readonly [string, string][] = [
  ["Content-Type", "application/problem+json"],
  ["Cache-Control", "no-store"],
];

/** A problem answer's body, for an answer put together ahead of time. */
export const problemBody = (status: number, type: string, title: string, detail: string) => JSON.stringify({ type: `urn:slidegate:${type}`, title, status, detail });
