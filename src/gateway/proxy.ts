/**
 * The request the origin receives and the way back. The outbound request is built only for a
 * request the gate lets through, from parts the runtime has already accepted (its method and
 * headers) and the canonical path. It carries the canonical path, the client address in a
 * header the origin can trust, the client's own `Accept-Encoding` (not the one the runtime hands
 * the Worker), and no hop-by-hop headers (RFC 9110 §7.6.1) — except the
 * Upgrade of a WebSocket handshake, which the runtime turns into a proxied socket. A
 * `Connection` header naming things that are no header names removes nothing rather than
 * throwing, so a charged request is not lost to a 500.
 *
 * Headers are copied by the runtime in one piece, then only the names actually present are
 * removed: each call into the runtime's `Headers` costs more than reading them once in
 * JavaScript, and an admitted request crosses here twice.
 *
 * On the way back, a URL header (`Location`, `Content-Location`, `Refresh`'s url) that would
 * send the client to ORIGIN_URL's own origin is made to name the URL the client asked for, as
 * nginx's `proxy_redirect default` does: the origin is sent `Host: <ORIGIN_URL's host>` (the
 * runtime's fetch sets it from the URL), so an origin that builds absolute URLs from Host
 * (frameworks' absolute redirects, nginx's own for a directory) would otherwise hand the public
 * an internal address. Only the inverse of what `prepare` does is undone — ORIGIN_URL's path
 * before the public path — so a URL outside that path, which no public URL reaches, is left as
 * the origin wrote it. A value that is no URL is left too: an admitted, charged request must
 * not become a 500.
 *
 * @example
 * const toOrigin = createForwarder({ origin: new URL("https://api.example.com"), clientIpHeader: "x-client-ip", passForwardedHeaders: false });
 * const response = await toOrigin.send(toOrigin.prepare(request, { url, path: "/v1/users", clientIp: "203.0.113.7" }), [["X-RateLimit-Limit", "10"]], url);
 */

import type { GateConfig } from "../config/rate-limits.ts";
import { exposeGateFields } from "../http/cors.ts";
import type { HeaderFields } from "../http/rate-limit-headers.ts";

/** The origin could not be reached, or answered what no response can carry: the one failure that is a 502. */
export class OriginError extends Error {
  override name = "OriginError";
}

/**
 * The client's upload broke off before the origin answered: the client hung up or closed its
 * sending side mid-body, or sent framing the runtime cannot read. No failure of the origin's,
 * though the runtime fails the origin's fetch() with the very error an origin's reset gives.
 */
export class ClientAbort extends Error {
  override name = "ClientAbort";
}

/** The origin did not start its answer within `originTimeout` (see `OriginDeadline`): a 504. */
export class OriginTimeout extends Error {
  override name = "OriginTimeout";
  /** the time limit that passed, ms */
  readonly limitMs: number;
  constructor(limitMs: number, options?: ErrorOptions) {
    super(`the origin sent no response head within ${limitMs} ms`, options);
    this.limitMs = limitMs;
  }
}

/** What a deadline aborts the origin's fetch with: told apart from a failed read of the client's upload, the one other reason. */
const TIMED_OUT = new Error("originTimeout passed");

/**
 * The time the gate waits on the origin, bounded by `originTimeout` (`limitMs`): the wait for its
 * response head once the request has gone, and, for an upload the gate reads (`watchedUpload`),
 * each wait for the origin to take the next piece of it. A wait on the client's upload is the
 * client's and is not counted: a client that uploads slowly to a quick origin is no origin
 * failing, and any caller could make one. Once the head has come (`end`) nothing is timed: a
 * long download, an event stream, a WebSocket after its 101 go on as long as they do.
 *
 * When the time is up, the origin's fetch is aborted with `TIMED_OUT` through `controller`; an
 * upload the client breaks off aborts the same controller with its own error. The first
 * reason stays, so the one cause is told whichever comes later.
 */
interface OriginDeadline {
  readonly limitMs: number;
  readonly controller: AbortController;
  /** The gate waits on the origin from now: this time counts. */
  waiting(): void;
  /** The gate waits on the client from now (the next piece of its upload): this time does not count. */
  idle(): void;
  /** The head has come, or the fetch failed otherwise: nothing more to time. */
  end(): void;
  /** whether the time was up before anything else aborted the fetch */
  readonly timedOut: boolean;
}

/**
 * One timer at a time: set when a wait on the origin begins, it is set again only if, when it
 * fires, it finds a wait that began later (an upload's pieces come and go many times a limit).
 */
function originDeadline(limitMs: number): OriginDeadline {
  const controller = new AbortController();
  // when the present wait on the origin began; undefined while the gate waits on the client
  let since: number | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let over = false;
  const check = () => {
    timer = undefined;
    if (over || since === undefined) return;
    const left = since + limitMs - Date.now();
    if (left > 0) {
      timer = setTimeout(check, left);
      return;
    }
    over = true;
    controller.abort(TIMED_OUT);
  };
  return {
    limitMs,
    controller,
    waiting() {
      if (over || since !== undefined) return;
      since = Date.now();
      timer ??= setTimeout(check, limitMs);
    },
    idle() {
      since = undefined;
    },
    end() {
      over = true;
      if (timer !== undefined) clearTimeout(timer);
    },
    get timedOut() {
      return controller.signal.reason === TIMED_OUT;
    },
  };
}

/**
 * The most one read of an upload takes: a large upload crosses into JavaScript a few times per
 * megabyte, not at each of the runtime's 4 KB pieces.
 */
const UPLOAD_READ = 64 * 1024;

/**
 * The buffer an upload is first read into: each upload in flight holds its buffer while it waits
 * on the client, so one that sends a little and then stalls or trickles holds this much, not
 * `UPLOAD_READ` (in workerd, each stalled upload's 64 KiB buffer was 64 KiB more of the process's
 * resident memory). A read that brings less takes a grown buffer back to this size, the larger
 * one left to the garbage collector, so a burst and then a trickle does not keep 64 KiB either.
 */
const UPLOAD_READ_FIRST = 4 * 1024;

/** A Content-Length the runtime framed the body by: digits, zeros before them or not, of any length. */
const DECIMAL_LENGTH = /^\d+$/;

/**
 * `request`'s body as the origin's fetch() is to read it, and a signal aborted when reading the
 * client's side fails; undefined when the body goes on as it came: a Content-Length of 0 (none
 * to break off), or one the gate cannot read as the runtime framed the body by.
 *
 * Handed on as it came, the body is read by the runtime, which fails the origin's fetch() with
 * "Network connection lost." whichever side hung up, and sends on a chunked upload whose client
 * hung up as if it had ended there (an origin took a cut upload for a whole one). Here the
 * gate reads it, so a failed read is the client's alone, and the fetch is aborted on it: the
 * origin sees its request cut off. The stream the origin reads is the runtime's own, of the
 * client's length (a Content-Length goes on as one, not chunked, up to 2^53 - 1 bytes).
 */
function watchedUpload(
  request: Request,
  body: ReadableStream<Uint8Array>,
  deadline: OriginDeadline | undefined,
): { body: ReadableStream<Uint8Array>; signal: AbortSignal } | undefined {
  let length: number | undefined;
  // the runtime reads a chunked body as chunked whatever Content-Length is beside it
  if (!request.headers.has("transfer-encoding")) {
    const declared = request.headers.get("content-length");
    if (declared !== null) {
      if (!DECIMAL_LENGTH.test(declared)) return undefined;
      const value = Number(declared);
      if (value === 0) return undefined;
      // past 2^53 - 1 no stream of that length can be made (nor can any client send as much):
      // such an upload goes on chunked, watched all the same, or any caller could make an
      // upstream_error line at will by declaring one and hanging up
      if (Number.isSafeInteger(value)) length = value;
    }
  }
  let reader: ReadableStreamBYOBReader;
  try {
    reader = body.getReader({ mode: "byob" });
  } catch {
    // a body that is no byte stream: it cannot be read into the gate's buffer, so the runtime reads it
    return undefined;
  }
  const { readable, writable } = length === undefined ? new IdentityTransformStream() : new FixedLengthStream(length);
  // one controller for both reasons to abort the fetch (see OriginDeadline)
  const aborted = deadline?.controller ?? new AbortController();
  void pump(reader, writable.getWriter(), aborted, Math.min(length ?? UPLOAD_READ, UPLOAD_READ), deadline);
  return { body: readable, signal: aborted.signal };
}

/**
 * Reads the client's upload from `reader` into `writer`, each piece once the one before is taken (the origin reads the
 * upload as the client sends it, and no faster), into one buffer used again: a write to the
 * runtime's stream is done with its bytes once it resolves. The buffer starts at
 * `UPLOAD_READ_FIRST` and doubles, up to `most`, each time a read fills it (a client sending
 * faster than it is read); a read that brings less than `UPLOAD_READ_FIRST` (a client trickling)
 * takes it back there. A failed read aborts `aborted`; a failed write (the origin's side gone)
 * cancels the client's body, as the runtime's fetch does.
 * The `deadline` is told which side the pump waits on: the client for a read, the origin for a
 * write and, once the upload is whole, for its answer.
 */
async function pump(
  reader: ReadableStreamBYOBReader,
  writer: WritableStreamDefaultWriter<Uint8Array>,
  aborted: AbortController,
  most: number,
  deadline: OriginDeadline | undefined,
): Promise<void> {
  const least = Math.min(UPLOAD_READ_FIRST, most);
  let buffer = new ArrayBuffer(least);
  for (;;) {
    let read: ReadableStreamReadResult<Uint8Array>;
    deadline?.idle();
    try {
      read = await reader.read(new Uint8Array(buffer));
    } catch (error) {
      // aborted, not ended: ending a chunked upload would hand the origin its part as the whole
      aborted.abort(error);
      writer.abort(error).catch(() => {});
      return;
    }
    deadline?.waiting();
    if (read.done) {
      // a body shorter than its Content-Length fails the close: the runtime's fetch fails on it
      await writer.close().catch(() => {});
      return;
    }
    try {
      await writer.write(read.value);
    } catch (error) {
      await reader.cancel(error).catch(() => {});
      return;
    }
    const size = read.value.buffer.byteLength;
    const got = read.value.byteLength;
    if (got === size && size < most) buffer = new ArrayBuffer(Math.min(size * 2, most));
    else if (got < least && size > least) buffer = new ArrayBuffer(least);
    else buffer = read.value.buffer as ArrayBuffer;
  }
}

/**
 * CGI-style origins (PHP, WSGI, Rack) read `X_Forwarded_For` and `X-Forwarded-For` as one
 * header, and PHP `X.Forwarded.For` too (Caddy's FastCGI and FrankenPHP pass the name on as
 * `HTTP_X.FORWARDED.FOR`, and PHP registers a variable's `.` as `_`): names are compared in
 * that one spelling.
 */
const oneSpelling = (name: string) => name.toLowerCase().replace(/[_.]/g, "-");

const NONE: ReadonlySet<string> = new Set();

const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"]);

/**
 * Headers a client can write to tell an origin who and where it is: dropped unless the
 * operator passes them on. The client address header is always the gate's own. The names
 * frameworks read a client address from (Rails and PHP read `Client-IP`, others
 * `X-Cluster-Client-IP`; the common PHP client-address function `X-Forwarded` and
 * `Forwarded-For` too) are here as well as the standard ones.
 */
const FORWARDING_HEADERS = [
  "x-forwarded-for",
  "x-forwarded-host",
  "x-forwarded-proto",
  "x-forwarded-port",
  "forwarded",
  "x-real-ip",
  "true-client-ip",
  "x-client-ip",
  "client-ip",
  "x-cluster-client-ip",
  "fastly-client-ip",
  "x-original-forwarded-for",
  "x-forwarded",
  "forwarded-for",
  // the scheme as Rack reads it besides X-Forwarded-Proto
  "x-forwarded-scheme",
  "x-forwarded-ssl",
  // where a proxy in front says the request went: the base path applications build URLs from
  "x-original-path",
  "x-forwarded-uri",
  "x-forwarded-path",
  "x-forwarded-prefix",
  "x-envoy-original-path",
  // the proxy in front by name (Apache mod_proxy, Traefik)
  "x-forwarded-server",
  // a client certificate a TLS-terminating proxy vouches for: an origin that trusts one takes it
  // for the caller's identity, so a client's own is dropped (RFC 9440 has every proxy do so for
  // its two; Envoy's XFCC, ASP.NET Core's certificate forwarding and Azure's carry the same)
  "client-cert",
  "client-cert-chain",
  "x-forwarded-client-cert",
  "x-client-cert",
  "x-arr-clientcert",
  // Traefik's PassTLSClientCert and an AWS Application Load Balancer's mutual TLS write these
  // names as they stand (neither is configured per deployment)
  "x-forwarded-tls-client-cert",
  "x-forwarded-tls-client-cert-info",
  "x-amzn-mtls-clientcert",
  "x-amzn-mtls-clientcert-leaf",
  "x-amzn-mtls-clientcert-serial-number",
  "x-amzn-mtls-clientcert-issuer",
  "x-amzn-mtls-clientcert-subject",
  "x-amzn-mtls-clientcert-validity",
];

/**
 * Headers by which origins route instead of by the request line — IIS URL Rewrite, Symfony
 * and Zend by X-Original-URL and X-Rewrite-URL, nginx setups by X-Original-URI, the common
 * Flask proxy recipe by X-Script-Name: a client's own would walk around the rules of the path
 * the gate matched, so they never go on, whatever `passForwardedHeaders` says.
 */
const ROUTING_HEADERS = ["x-original-url", "x-rewrite-url", "x-original-uri", "x-script-name"];

/**
 * `Proxy`, which no HTTP standard defines and no client needs to send: CGI origins (PHP, Go's
 * net/http/cgi, Python's CGI handlers) hand it to the application as HTTP_PROXY, which their HTTP
 * clients read as the proxy for their own outbound requests (httpoxy, CVE-2016-5385). It never
 * goes on, whatever `passForwardedHeaders` says.
 */
const HTTPOXY = "proxy";

/**
 * Why the origin never receives a client's header of this name when the gate reads an API key
 * from it, or undefined when it goes on — decided as `prepare` decides it (the key header's
 * own spelling goes on whatever `Connection` lists): hop-by-hop, the client address header
 * (the gate's value replaces the client's), Expect, a header origins route by, `Proxy`, or a
 * forwarding header that the operator does not pass on.
 *
 * @example
 * withheldFromOrigin("Proxy-Authorization", { clientIpHeader: "x-forwarded-for", passForwardedHeaders: false }); // "hop-by-hop"
 */
export function withheldFromOrigin(
  name: string,
  options: Pick<ForwardOptions, "clientIpHeader" | "passForwardedHeaders">,
): "hop-by-hop" | "client-address" | "expect" | "routing" | "httpoxy" | "forwarding" | undefined {
  const spelling = oneSpelling(name);
  if (HOP_BY_HOP.has(name.toLowerCase())) return "hop-by-hop";
  if (spelling === oneSpelling(options.clientIpHeader)) return "client-address";
  if (spelling === "expect") return "expect";
  if (ROUTING_HEADERS.includes(spelling)) return "routing";
  if (spelling === HTTPOXY) return "httpoxy";
  if (!options.passForwardedHeaders && FORWARDING_HEADERS.includes(spelling)) return "forwarding";
  return undefined;
}

const WITHHELD_BECAUSE = {
  "hop-by-hop": "as a hop-by-hop header",
  "client-address": "and writes the client address there instead",
  expect: "and sends the body whole instead",
  routing: "among the headers origins route by (X-Original-URL and the like), whatever passForwardedHeaders says",
  httpoxy: "as CGI origins take it for the proxy of their own outbound requests (httpoxy), whatever passForwardedHeaders says",
  forwarding: "among the forwarding headers clients send unless passForwardedHeaders is true",
} as const;

/**
 * An API-key header the origin never receives, in words an operator can act on (what
 * `check-config` prints beside `configurationWarnings`). Said, not refused: a header the gate
 * alone reads can be a credential for the gate alone. The names that can never carry a key
 * are refused when the configuration is parsed.
 */
export function keyHeaderWarnings(config: Pick<GateConfig, "keyHeader" | "clientIpHeader" | "passForwardedHeaders" | "unknownKeys">): string[] {
  if (config.keyHeader === undefined) return [];
  const withheld = withheldFromOrigin(config.keyHeader, config);
  if (withheld === undefined) return [];
  const madeUp =
    config.unknownKeys === "defaultTier"
      ? ' With identity.unknownKeys "defaultTier", a made-up key gets the default tier\'s quota for a request the origin serves as anonymous: register your keys and set identity.unknownKeys to "reject".'
      : "";
  return [
    `identity.header ("${config.keyHeader}") never reaches the origin: the gate drops it ${WITHHELD_BECAUSE[withheld]}. The origin cannot tell one key from another, or from none: right for a credential meant for the gate alone, but an origin that reads the key needs it in a header that goes on, like "x-api-key" or "Authorization".${madeUp}`,
  ];
}

/**
 * What a `Connection` header lists (hop-by-hop for this connection only), as a Set: a client
 * may list thousands of names, and each header is looked up in it. A listed name that is no
 * header name (`a b`) matches nothing.
 */
function connectionListed(headers: Headers, names: readonly string[]): ReadonlySet<string> {
  if (!names.includes("connection")) return NONE;
  return new Set((headers.get("connection") ?? "").split(",").map((h) => h.trim().toLowerCase()));
}

/**
 * The names of a client's request that must not reach the origin: hop-by-hop ones (but the
 * Upgrade of a WebSocket handshake), those its `Connection` header lists (but the headers the
 * gate read), those in `drop` (lower case, with `_` read as `-`), and any spelling of a name in
 * `respelled` (one spelling → the one that goes on) but that one, since a CGI origin reads them
 * all as one header (see `oneSpelling`).
 * Names only are read (the runtime yields them in lower case): values can be long, and each
 * one read is a copy out of the runtime.
 */
function requestDropped(headers: Headers, drop: ReadonlySet<string>, respelled: ReadonlyMap<string, string>, keepUpgrade: boolean): string[] {
  const names = [...headers.keys()];
  const listed = connectionListed(headers, names);
  const dropped: string[] = [];
  for (const name of names) {
    if (keepUpgrade && name === "upgrade") continue;
    const spelling = name.includes("_") || name.includes(".") ? oneSpelling(name) : name;
    const exact = respelled.get(spelling);
    // a header the gate decided by goes on even when Connection lists it: dropping the key
    // header would let a made-up key buy fresh quota for a request the origin serves as anonymous
    const read = exact === name;
    if (HOP_BY_HOP.has(name) || (listed.has(name) && !read) || drop.has(spelling) || (exact !== undefined && !read)) dropped.push(name);
  }
  return dropped;
}

/**
 * The names of the origin's answer that must not reach the client: hop-by-hop ones, the
 * gate's own (a fail-open mark, shadow reports), which are the gate's to write, and `Alt-Svc`:
 * the origin's alternative services are the origin's, and a client takes them for the public
 * host's own, so one naming the origin's address (`h3="origin.internal:443"`) would tell that
 * address and send the client's next requests there, past the gate (the edge advertises its own). The URL headers
 * among those kept are added to `urlHeaders` when given: found in the pass over the names already
 * made, so an answer without them pays no call into the runtime for them.
 */
function responseDropped(headers: Headers, urlHeaders?: string[]): string[] {
  const names = [...headers.keys()];
  const listed = connectionListed(headers, names);
  const dropped: string[] = [];
  for (const name of names) {
    if (HOP_BY_HOP.has(name) || listed.has(name) || name.startsWith("x-slidegate-") || name === "alt-svc") dropped.push(name);
    else if (urlHeaders && URL_HEADERS.has(name)) urlHeaders.push(name);
  }
  return dropped;
}

/** Response headers whose URL a client follows or keeps (the runtime yields names in lower case). */
const URL_HEADERS: ReadonlySet<string> = new Set(["location", "content-location", "refresh", "link"]);

/**
 * An `anchor` parameter of a Link value, at a `;` (RFC 8288 §3.2: the URI of the link's context,
 * quoted or a token), read from the `;` on (sticky): group 1 its quoted value as written, group 2
 * its token.
 */
const LINK_ANCHOR = /;[\t ]*anchor[\t ]*=[\t ]*(?:"((?:[^"\\]|\\[\s\S])*)"|([^\t ;,"]+))/iy;

/** Text between a `<` and the next `>`, holding neither. */
const BRACKETED = /<([^<>]*)>/g;

/**
 * A Link value (RFC 8288 §3: `<URI-Reference>; rel="next"; anchor="…"`, values joined by `,`)
 * with each target and each `anchor` parameter's URI passed through `rewrite`, read as a client
 * reads it: a target runs from a `<` to its first `>` (or the value's end, when none closes it),
 * whatever it holds (a `<` echoed in a query), and a quoted string (`title="a <b"`, with its `\`
 * escapes) is no target. One pass over the value.
 */
function rewriteLink(value: string, rewrite: (url: string) => string): string {
  let out = "";
  let copied = 0;
  /** `url` at value[start, end), rewritten in place */
  const replace = (start: number, end: number) => {
    const url = value.slice(start, end);
    const rewritten = rewrite(url);
    if (rewritten === url) return;
    out += value.slice(copied, start) + rewritten;
    copied = end;
  };
  for (let i = 0; i < value.length; ) {
    const c = value.charCodeAt(i);
    if (c === 60 /* < */) {
      const close = value.indexOf(">", i + 1);
      const end = close < 0 ? value.length : close;
      replace(i + 1, end);
      i = end + 1;
    } else if (c === 34 /* " */) {
      i++;
      while (i < value.length && value.charCodeAt(i) !== 34) i += value.charCodeAt(i) === 92 /* \ */ ? 2 : 1;
      i++;
    } else if (c === 59 /* ; */) {
      LINK_ANCHOR.lastIndex = i;
      const anchor = LINK_ANCHOR.exec(value);
      if (!anchor) {
        i++;
        continue;
      }
      const end = i + anchor[0].length - (anchor[1] === undefined ? 0 : 1);
      replace(end - (anchor[1] ?? anchor[2]!).length, end);
      i = i + anchor[0].length;
    } else i++;
  }
  return copied === 0 ? value : out + value.slice(copied);
}

/** A URL without a scheme (`//host/path`; the parser reads `\` as `/` in an http URL). */
const SCHEME_RELATIVE = /^[/\\]{2}/;

/**
 * What comes after a URL's authority, as written: an optional scheme, the slashes (the parser
 * reads `\` as `/` in an http URL), the authority up to the first `/`, `\`, `?` or `#`.
 */
const AFTER_AUTHORITY = /^(?:[A-Za-z][A-Za-z\d+.-]*:)?[/\\]*[^/\\?#]*(.*)$/s;

/**
 * A Refresh value (HTML's declarative refresh): the delay, `;` or `,`, an optional `url=`, and
 * the URL, perhaps quoted. Browsers follow it as they follow a Location. Read without the delay
 * too, which browsers would not follow: its URL is still there for the caller to read.
 */
const REFRESH = /^([\t\n\f\r ]*[\d.]*[\t\n\f\r ]*[;,]?[\t\n\f\r ]*(?:url[\t\n\f\r ]*=[\t\n\f\r ]*)?)(["']?)(.*)$/is;

/**
 * A URL header's value (`name` in lower case) with ORIGIN_URL's origin, and the path `prepare`
 * puts before every public path, replaced by the origin of the URL the client asked for; any
 * other value as it is. Origins are compared as the URL parser writes them (case, a default port
 * spelled out), and a relative value is read as the client reads it, against the URL it asked
 * for, so it never lands on the origin's address.
 */
function createUrlRewriter(origin: URL): (name: string, value: string, asked: URL) => string {
  const own = origin.origin;
  // what prepare() puts before each public path ("/api" for ORIGIN_URL .../api or .../api/)
  const prefix = origin.pathname.replace(/\/$/, "");

  /** One URL: on ORIGIN_URL's origin, on the origin the client asked for instead. */
  function rewrite(value: string, asked: URL): string {
    // a URL without a scheme has that of the request the origin answered, not the client's
    const at = URL.parse(value, SCHEME_RELATIVE.test(value) ? origin : asked);
    if (at === null || at.origin !== own) return value;
    const publicOrigin = asked.origin;
    // a gate asked at the origin's own address hides nothing
    if (publicOrigin === own) return value;
    // No public URL leads outside ORIGIN_URL's path: such a URL keeps its path as written, on the
    // public origin all the same, where it reaches nothing the origin meant (a 404, never a
    // loop) — but the public never learns the origin's address.
    const cut = !prefix || at.pathname.startsWith(`${prefix}/`) ? prefix : "";
    const path = at.pathname.slice(cut.length);
    // the rest as the origin spelled it, where that spelling reads back as the same URL; else as
    // the parser writes it. A value holding U+FFFD had bytes that are not UTF-8, which the
    // runtime cannot hand back: its parsed form carries no such character.
    const tail = AFTER_AUTHORITY.exec(value)?.[1];
    if (tail?.startsWith(cut) && !value.includes("\uFFFD")) {
      const spelled = publicOrigin + tail.slice(cut.length);
      const back = URL.parse(spelled);
      if (back && back.origin === publicOrigin && back.pathname === path && back.search === at.search && back.hash === at.hash) return spelled;
    }
    return publicOrigin + path + at.search + at.hash;
  }

  /** One value of a URL header: the whole value, or a Refresh's url part. */
  function rewriteValue(name: string, value: string, asked: URL): string {
    if (name !== "refresh") return rewrite(value, asked);
    const refresh = REFRESH.exec(value);
    if (!refresh) return value;
    // only its url part: without the closing quote and what follows it
    const [, lead, quote, rest] = refresh as unknown as [string, string, string, string];
    const end = quote ? rest.indexOf(quote) : -1;
    const url = end < 0 ? rest : rest.slice(0, end);
    if (!url) return value;
    const rewritten = rewrite(url, asked);
    return rewritten === url ? value : lead + quote + rewritten + (end < 0 ? "" : rest.slice(end));
  }

  return (name, value, asked) => {
    // an API's pagination (rel="next") built from Host names the origin as a redirect would
    if (name === "link") {
      const each = (url: string) => rewrite(url, asked);
      // and every <…> holding no other < as well (one in a quoted title, or after a < no > closed,
      // which a client reads as part of that target): a URL of ORIGIN_URL's origin there tells its
      // address all the same, and a rewritten one names no such origin any more
      return rewriteLink(value, each).replace(BRACKETED, (_all, url: string) => `<${each(url)}>`);
    }
    const whole = rewriteValue(name, value, asked);
    // The header sent more than once reaches the gate as one value, joined by ", " (only
    // Set-Cookie is kept apart): a later one naming ORIGIN_URL's origin is rewritten too, or it
    // would tell its address. A value whose later parts name no such origin is read as one URL.
    if (!value.includes(", ")) return whole;
    const parts = value.split(", ");
    const each = parts.map((part) => rewriteValue(name, part, asked));
    return each.some((part, i) => i > 0 && part !== parts[i]) ? each.join(", ") : whole;
  };
}

/**
 * A few names to remove are deleted one by one (the usual case: each call into the runtime's
 * Headers is dear). Past this many — a client that lists every header in `Connection` — the
 * headers are copied without them in one pass instead, as each delete searches the whole list.
 */
const DELETE_ONE_BY_ONE = 16;

/**
 * `source` without `names`, in one pass; undefined when a value kept holds U+FFFD, and the
 * names are then deleted one by one after all. workerd hands JavaScript each byte of a value
 * that is not UTF-8 (obs-text: a Latin-1 filename in Content-Disposition) as U+FFFD, so a copy
 * would send U+FFFD on in its place, where the runtime's own copy keeps the byte.
 */
function without(source: Headers, names: readonly string[]): Headers | undefined {
  const gone = new Set(names);
  const kept = new Headers();
  for (const [name, value] of source) {
    if (gone.has(name)) continue;
    if (value.includes("\uFFFD")) return undefined;
    kept.append(name, value);
  }
  return kept;
}

export interface ForwardOptions {
  /** where admitted requests go; undefined: on to the request's own URL (a Worker on a route) */
  origin?: URL;
  /** the header that carries the client address to the origin (lower case) */
  clientIpHeader: string;
  /** true: the client's own forwarding headers reach the origin */
  passForwardedHeaders: boolean;
  /**
   * headers the gate reads (the API key's, the method overrides), as it reads them: only that
   * spelling goes on, never another with `_` (or `.`) for `-` or the other way that a CGI origin
   * (PHP, WSGI, Rack; PHP alone for `.`) reads as the same header; and it goes on whatever the client's `Connection`
   * header lists, so the origin sees what the request was counted as
   */
  respelled?: readonly string[];
  /**
   * the longest the gate waits on the origin for its response head, ms (see `OriginDeadline`);
   * undefined: no time limit of the gate's own, and nothing of one is made
   */
  originTimeoutMs?: number | undefined;
}

/**
 * The request to `target` with `body`, watched (see `watchedUpload`) where its length is known to
 * the gate. An upload the gate does not watch is the runtime's to send: the `deadline` counts
 * from now, its sending included.
 */
function withBody(target: string, request: Request, body: ReadableStream<Uint8Array>, headers: Headers, deadline: OriginDeadline | undefined): Request {
  const upload = watchedUpload(request, body, deadline);
  if (upload) return new Request(target, { method: request.method, headers, body: upload.body, redirect: "manual", signal: upload.signal });
  if (!deadline) return new Request(target, { method: request.method, headers, body, redirect: "manual" });
  deadline.waiting();
  return new Request(target, { method: request.method, headers, body, redirect: "manual", signal: deadline.controller.signal });
}

/** Where a request goes: `origin` + path + query, or (no origin) its own origin + path + query. */
function targetUrl(url: URL, path: string, origin: string | undefined): string {
  // `search` is "" for a bare "?" too, which the client sent (a request URL holds no fragment)
  const query = url.search || (url.href.endsWith("?") ? "?" : "");
  return (origin ?? url.origin) + path + query;
}

export interface Forwarder {
  /**
   * The request to send to the origin: `path` (canonical) instead of the client's spelling,
   * the body on any method (read by the gate on its way, see `watchedUpload`), and `clientIp`
   * in the client address header.
   */
  prepare(request: Request, canonical: { url: URL; path: string; clientIp?: string }): Request;
  /**
   * Sends `outbound`; `extra` headers (the rate-limit ones) replace any of the same name on
   * the origin's answer, and are exposed to browser code when the origin answered with CORS.
   * Throws `OriginError` when the origin cannot be reached or answers a status no response can
   * carry, `OriginTimeout` when it sent no response head within `originTimeoutMs`, and
   * `ClientAbort` when the client's upload broke off before the origin answered.
   * `asked` is the URL the client asked for: a URL header naming ORIGIN_URL's origin names its
   * origin instead.
   */
  send(outbound: Request, extra: Readonly<HeaderFields>, asked: URL): Promise<Response>;
}

/** The way to the origin, with everything that depends only on `options` settled once. */
export function createForwarder(options: ForwardOptions): Forwarder {
  const origin = options.origin?.href.replace(/\/$/, "");
  const clientIpHeader = options.clientIpHeader.toLowerCase();
  // Forwarded has a syntax of its own (RFC 7239): a bare address there is one no origin parses
  const clientIpValue = clientIpHeader === "forwarded" ? (ip: string) => (ip.includes(":") ? `for="[${ip}]"` : `for=${ip}`) : (ip: string) => ip;
  // Expect: the runtime's fetch hands an origin's "100 Continue" back as if it were the answer;
  // the body is sent whole without waiting for it
  const dropped = [oneSpelling(clientIpHeader), "expect", ...ROUTING_HEADERS, HTTPOXY, ...(options.passForwardedHeaders ? [] : FORWARDING_HEADERS)];
  const drop = new Set(dropped);
  const respelled = new Map((options.respelled ?? []).map((name) => [oneSpelling(name), name.toLowerCase()]));
  // without ORIGIN_URL the request went to its own URL: the origin's address is the public one
  const rewriteUrl = options.origin ? createUrlRewriter(options.origin) : undefined;
  // each outbound request's deadline, from prepare() to send(); none made without originTimeout
  const timeoutMs = options.originTimeoutMs;
  const deadlines = timeoutMs === undefined ? undefined : new WeakMap<Request, OriginDeadline>();

  return {
    prepare(request, canonical) {
      const upgrade = request.headers.get("upgrade")?.trim().toLowerCase() === "websocket";
      const dropped = requestDropped(request.headers, drop, respelled, upgrade);
      const copied = dropped.length > DELETE_ONE_BY_ONE ? without(request.headers, dropped) : undefined;
      const target = targetUrl(canonical.url, canonical.path, origin);
      // the runtime copies the headers once, into the request's own; then only names present are removed
      const headers = copied ?? request.headers;
      const deadline = timeoutMs === undefined ? undefined : originDeadline(timeoutMs);
      const outbound =
        request.body === null
          ? deadline
            ? new Request(target, { method: request.method, headers, body: null, redirect: "manual", signal: deadline.controller.signal })
            : new Request(target, { method: request.method, headers, body: null, redirect: "manual" })
          : request.method === "GET" || request.method === "HEAD"
            ? // A GET or HEAD with a body (a search query, say) is the origin's to read: the Request
              // constructor refuses one with such a method in its init, but takes it over from a
              // request that has one. So it goes on as it came, unwatched: no other body can.
              deadline
              ? new Request(new Request(target, request), { headers, redirect: "manual", signal: deadline.controller.signal })
              : new Request(new Request(target, request), { headers, redirect: "manual" })
            : withBody(target, request, request.body, headers, deadline);
      if (deadline) {
        // a watched upload's pump tells the deadline when the origin is waited on; else from now
        if (request.body === null || request.method === "GET" || request.method === "HEAD") deadline.waiting();
        deadlines!.set(outbound, deadline);
      }
      if (!copied) for (const name of dropped) outbound.headers.delete(name);
      // The runtime hands a Worker `Accept-Encoding: br, gzip` whatever the client sent, and keeps
      // the client's in `cf.clientAcceptEncoding` ("" for none). Told the runtime's, the origin
      // chose a coding the client may not take, which the runtime then undid on the way back:
      // a HEAD kept the coded length, and a range of the coded bytes arrived empty.
      const accepted = request.cf?.clientAcceptEncoding;
      if (typeof accepted === "string" && !dropped.includes("accept-encoding")) {
        if (accepted) outbound.headers.set("accept-encoding", accepted);
        else outbound.headers.delete("accept-encoding");
      }
      if (canonical.clientIp !== undefined) outbound.headers.set(clientIpHeader, clientIpValue(canonical.clientIp));
      return outbound;
    },

    async send(outbound, extra, asked) {
      let upstream: Response;
      try {
        upstream = await fetch(outbound);
      } catch (error) {
        const text = error instanceof Error ? error.message : String(error);
        const deadline = deadlines?.get(outbound);
        deadline?.end();
        // aborted by the gate: the origin's time was up, or (the other reason the signal has)
        // reading the client's upload failed before the origin answered
        if (deadline?.timedOut) throw new OriginTimeout(deadline.limitMs, { cause: error });
        if (outbound.body !== null && outbound.signal.aborted) throw new ClientAbort(text, { cause: error });
        throw new OriginError(text, { cause: error });
      }
      // the head has come (a WebSocket's 101 among them): what follows takes as long as it takes
      deadlines?.get(outbound)?.end();
      // an interim answer (1xx but a WebSocket's 101) or a status past 599: no Response carries it
      if (!upstream.webSocket && (upstream.status < 200 || upstream.status > 599)) throw new OriginError(`the origin answered with status ${upstream.status}`);
      const urlHeaders: string[] | undefined = rewriteUrl && !upstream.webSocket ? [] : undefined;
      const dropped = responseDropped(upstream.headers, urlHeaders);
      const copied = dropped.length > DELETE_ONE_BY_ONE ? without(upstream.headers, dropped) : undefined;
      let response: Response;
      // a WebSocket handshake the origin accepted: the runtime proxies the socket both ways
      if (upstream.webSocket) response = new Response(null, { status: 101, webSocket: upstream.webSocket, headers: copied ?? upstream.headers });
      else if (copied) response = new Response(upstream.body, { status: upstream.status, statusText: upstream.statusText, headers: copied });
      // the usual case: the origin's answer as the runtime gave it, with mutable headers
      else response = new Response(upstream.body, upstream);
      if (!copied) for (const name of dropped) response.headers.delete(name);
      if (urlHeaders?.length) {
        for (const name of urlHeaders) {
          const value = response.headers.get(name)!;
          const rewritten = rewriteUrl!(name, value, asked);
          if (rewritten !== value) response.headers.set(name, rewritten);
        }
      }
      for (const [name, value] of extra) response.headers.set(name, value);
      // an answer the origin opened to another site: that site's code may read them too
      exposeGateFields(response.headers, extra);
      return response;
    },
  };
}
