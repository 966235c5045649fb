/**
 * Streams an admitted request to the origin and its answer back, as they are, less the
 * hop-by-hop headers that describe one connection and must not cross a proxy (RFC 9110 §7.6.1).
 */

const HOP_BY_HOP = ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

function endToEnd(source: Headers): Headers {
  const headers = new Headers(source);
  const listed = source.get("connection")?.split(",").map((h) => h.trim().toLowerCase()) ?? [];
  for (const name of [...HOP_BY_HOP, ...listed]) if (name) headers.delete(name);
  return headers;
}

/** Where a request goes: `origin` + path + query, or (no origin) its own URL, for a Worker on a route. */
export function targetUrl(request: Request, origin: URL | undefined): string {
  if (!origin) return request.url;
  const url = new URL(request.url);
  return origin.href.replace(/\/$/, "") + url.pathname + url.search;
}

/** Forwards `request`; `extra` headers (the rate-limit ones) are added to the origin's response. */
export async function forward(request: Request, origin: URL | undefined, extra: Headers): Promise<Response> {
  const upstream = await fetch(targetUrl(request, origin), {
    method: request.method,
    headers: endToEnd(request.headers),
    body: request.body,
    redirect: "manual",
  });
  const headers = endToEnd(upstream.headers);
  extra.forEach((value, name) => headers.set(name, value));
  return new Response(upstream.body, { status: upstream.status, statusText: upstream.statusText, headers });
}
