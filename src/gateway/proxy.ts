/**
 * The request the origin receives and the way back. The outbound request is built only for a
 * request the gate lets through, from parts the runtime has already accepted (its method and
 * headers) and the canonical path; a `Connection` header naming things that are no header
 * names removes nothing rather than throwing, so a charged request is not lost to a 500. It
 * carries the canonical path, the client address in a header the origin can trust, and no
 * hop-by-hop headers (RFC 9110 §7.6.1) — except the Upgrade of a WebSocket handshake, which
 * the runtime turns into a proxied socket.
 *
 * @example
 * const outbound = prepare(request, { url, path: "/v1/users", clientIp: "203.0.113.7" }, options);
 * const response = await send(outbound, rateLimitHeaders(decision));
 */

const HOP_BY_HOP = ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/**
 * Headers a client can write to tell an origin who and where it is: dropped unless the
 * operator passes them on. The client address header is always the gate's own.
 */
export const FORWARDING_HEADERS = ["x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "forwarded", "x-real-ip", "true-client-ip"];

/** An HTTP header name (RFC 9110 §5.1): what `Connection` may list. Anything else names no header. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;

function endToEnd(source: Headers, keepUpgrade = false): Headers {
  const headers = new Headers(source);
  const listed =
    source
      .get("connection")
      ?.split(",")
      .map((h) => h.trim().toLowerCase()) ?? [];
  // a listed name that is no header name (`a b`) removes nothing, and must not throw
  for (const name of [...HOP_BY_HOP, ...listed]) if (TOKEN.test(name) && !(keepUpgrade && name === "upgrade")) headers.delete(name);
  return headers;
}

export interface ForwardOptions {
  /** where admitted requests go; undefined: on to the request's own URL (a Worker on a route) */
  origin?: URL;
  /** the header that carries the client address to the origin (lower case) */
  clientIpHeader: string;
  /** true: the client's own forwarding headers reach the origin */
  passForwardedHeaders: boolean;
}

/** Where a request goes: `origin` + path + query, or (no origin) its own origin + path + query. */
export function targetUrl(url: URL, path: string, origin: URL | undefined): string {
  return (origin ? origin.href.replace(/\/$/, "") : url.origin) + path + url.search;
}

/**
 * The request to send to the origin: `path` (canonical) instead of the client's spelling, the
 * body unless the method cannot carry one (a GET or HEAD body means nothing to an origin and
 * fetch refuses it), and `clientIp` in the client address header.
 */
export function prepare(request: Request, canonical: { url: URL; path: string; clientIp?: string }, options: ForwardOptions): Request {
  const upgrade = request.headers.get("upgrade")?.trim().toLowerCase() === "websocket";
  const headers = endToEnd(request.headers, upgrade);
  if (!options.passForwardedHeaders) for (const name of FORWARDING_HEADERS) headers.delete(name);
  if (canonical.clientIp === undefined) headers.delete(options.clientIpHeader);
  else headers.set(options.clientIpHeader, canonical.clientIp);
  const bodyless = request.method === "GET" || request.method === "HEAD";
  if (bodyless) headers.delete("content-length");
  return new Request(targetUrl(canonical.url, canonical.path, options.origin), {
    method: request.method,
    headers,
    body: bodyless ? null : request.body,
    redirect: "manual",
  });
}

/**
 * Sends `outbound`; `extra` headers (the rate-limit ones) are added to the origin's answer.
 * Throws only when the origin cannot be reached.
 */
export async function send(outbound: Request, extra: Headers): Promise<Response> {
  const upstream = await fetch(outbound);
  const headers = endToEnd(upstream.headers);
  for (const [name, value] of extra) headers.set(name, value);
  // a WebSocket handshake the origin accepted: the runtime proxies the socket both ways
  if (upstream.webSocket) return new Response(null, { status: 101, webSocket: upstream.webSocket, headers });
  return new Response(upstream.body, { status: upstream.status, statusText: upstream.statusText, headers });
}
