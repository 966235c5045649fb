/**
 * RFC 9457 problem details: every answer the gate gives itself (as opposed to the
 * origin's) is `application/problem+json` with a stable `type`.
 *
 * @example
 * problem(429, "rate-limited", "Too Many Requests", "Limit \"minute\" allows 10 per 60 s.");
 */
export function problem(status: number, type: string, title: string, detail: string, headers?: HeadersInit): Response {
  const h = new Headers(headers);
  h.set("Content-Type", "application/problem+json");
  h.set("Cache-Control", "no-store");
  return new Response(JSON.stringify({ type: `urn:slidegate:${type}`, title, status, detail }), { status, headers: h });
}
