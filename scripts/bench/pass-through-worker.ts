/**
 * The baseline of the gateway benchmark: a Worker that only proxies, to the same origin the
 * gates stand in front of. What a gate adds is measured over this, not over the origin alone.
 * Built by the benchmark only; not part of slidegate.
 */

interface PassThroughEnv {
  ORIGIN_URL: string;
}

/** The request, as it came, to the origin; the origin's answer, as it came, back. */
export function proxy(request: Request, origin: string): Promise<Response> {
  const url = new URL(request.url);
  return fetch(origin + url.pathname + url.search, { method: request.method, headers: request.headers, body: request.body, redirect: "manual" });
}

export default {
  fetch: (request: Request, env: PassThroughEnv): Promise<Response> => proxy(request, env.ORIGIN_URL),
};
