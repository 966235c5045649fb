import { rmSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { posix } from "node:path";
import { type Context, Hono } from "hono";
import { methodOverride } from "hono/method-override";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll } from "vitest";
import { WebSocketServer } from "ws";
import { buildWorker } from "../../scripts/lib/build-worker.ts";
import { startIsolate } from "../../scripts/lib/fleet.ts";
import { rateLimits, startGateIsolate } from "./miniflare.ts";

/**
 * An origin that routes the way lenient web frameworks do, to stand behind the gate in
 * hostile-input tests and to serve as their oracle ("would the origin run this handler?").
 * A Hono app on node:http whose path lookup adds the leniencies of other common stacks:
 *
 * - percent-decoding (Hono's own `decodeURI`; Express, Go net/http, ASP.NET decode too)
 * - `;` path parameters dropped, then dot segments resolved (servlet containers: Tomcat, Spring)
 * - runs of `/` merged (nginx's `merge_slashes`, on by default)
 * - case-insensitive routes (Express's default, ASP.NET)
 * - a trailing slash ignored (Express's default, Hono's `strict: false`)
 * - Next.js's own requests for a page routed as the page: its data route
 *   (`/_next/data/<build id>/v1/users.json`, and `/_next/data/<build id>/index.json` for `/`), which runs the
 *   page's getServerSideProps, and a segment prefetch (`/v1/users.segments/_tree.segment.rsc`)
 * - SvelteKit's and React Router's requests for a page's data routed as the page, whose server
 *   load functions or loaders they run: SvelteKit's `/v1/users/__data.json` (`/__data.json` for
 *   `/`), React Router's `/v1/users.data` (the format suffix above), `/_root.data` for `/` and,
 *   with its trailing-slash-aware data requests, `/v1/users/_.data`; Nuxt's `/v1/users/_payload.json`
 *   (`_payload.js` without JSON payloads), which renders the page for its payload; Gatsby's
 *   `/page-data/v1/users/page-data.json` (`/page-data/index/page-data.json` for `/`), which runs
 *   an SSR page's getServerData; Qwik City's `/v1/users/q-data.json`, which runs its route loaders
 * - a directory's index script run for the directory: `/v1/users/index.php` is `/v1/users`, and
 *   `/index.php` is `/` (Apache's DirectoryIndex and nginx's index in PHP setups, IIS's default
 *   documents, Tomcat's welcome files)
 * - a controller's default action by its name: `/v1/users/index` is `/v1/users` (ASP.NET MVC's
 *   conventional route `{controller}/{action=Index}`, CakePHP's and CodeIgniter's routing, Yii's
 *   default action)
 * - a format suffix on the last segment ignored, from its first dot on: `/v1/users.json` and
 *   `/v1/users.tar.gz` are `/v1/users` (Rails' `(.:format)`, Spring's suffix matching), and so
 *   are trailing dots on any segment (IIS)
 * - HEAD served by the GET handler (Hono itself, like most frameworks)
 * - PUT and PATCH of a resource sent to one update handler (Rails' and Laravel's resource routes)
 * - `X-HTTP-Method-Override` obeyed on POST, and `_method` in a form body or the query,
 *   its name decoded (Hono's methodOverride middleware, as Rails, Laravel and Spring do)
 * - a PHP application's routing by the query: WordPress's `?rest_route=` on any path, Drupal 7's
 *   `?q=`, Yii's `?r=` and CodeIgniter 3's `?/path` on its front script (see `queryRoute`)
 * - a server rewrite that puts the decoded path into the front script's query unescaped (Apache's
 *   `RewriteRule ^(.*)$ index.php?q=$1` without the B flag, nginx's `try_files … /index.php?q=$uri`,
 *   and its `rewrite ^/(.*)$ /index.php?q=$1` for a raw `&`), modelled where it changes the route: a path whose decoded
 *   form holds a `&` routes as the front script with the query `q=<that path>`, so
 *   `/x%26q=user/login` and `/user/login&x=1` are `/user/login` (see `pathAsQuery`)
 *
 * Handlers answer JSON: which handler ran, the request line and headers as received, and how
 * many body bytes arrived. `GET /v1/socket` with an Upgrade is a WebSocket echo. A TRACE,
 * which the app cannot be handed, is answered 405.
 */
export interface FrameworkOrigin {
  url: string;
  /** how many times `handler` ran (a WebSocket handshake counts for "socket") */
  hits(handler: string): number;
  close(): Promise<void>;
}

export interface Echo {
  handler: string;
  method: string;
  /** the request target exactly as it arrived */
  target: string;
  headers: Record<string, string>;
  /** every header line as it arrived, in order */
  rawHeaders: string[];
  bodyBytes: number;
}

/** A directory's index script, as PHP and CGI setups name it for Apache's DirectoryIndex and nginx's index, IIS's default documents and Tomcat's welcome files. */
const INDEX_SCRIPT = /^(?:index\.(?:php|cgi|pl|jsp)|default\.aspx?)$/i;

/** A query parameter's name as PHP registers it: up to a NUL, leading spaces dropped, ` `, `.` and `[` as `_`. */
const phpName = (name: string) => name.split("\0")[0]!.replace(/^ +/, "").replace(/[ .[]/g, "_");

/**
 * The path a PHP application routes a request by its query, or undefined: WordPress serves
 * `?rest_route=/wp/v2/users` on any path as `/wp-json/wp/v2/users` (WP::parse_request reads it
 * from $_GET whatever the path; rest_api_loaded serves it); on its front script (`/`,
 * `/index.php`, `/index.php/x` whatever its PATH_INFO) Drupal 7 routes `?q=user/login` as `/user/login` (request_path), Yii `?r=site/login`
 * as `/site/login` (its default urlManager), and CodeIgniter 3 `?/site/login` as `/site/login`.
 * Parameter names as PHP reads them, the last of a repeated one.
 */
function queryRoute(query: string, front: boolean): string | undefined {
  const params = new Map<string, string>();
  for (const [name, value] of new URLSearchParams(query)) params.set(phpName(name), value);
  const rest = params.get("rest_route");
  if (rest) return `/wp-json/${rest}`;
  if (!front) return undefined;
  const named = params.get("q") || params.get("r");
  if (named) return `/${named}`;
  return query.startsWith("/") ? query.split("&")[0] : undefined;
}

/** Every escape of `path` decoded that decodes, as Apache and nginx decode a path before they rewrite it. */
export const serverDecoded = (path: string) =>
  path.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });

/**
 * The path a rewrite into the front script's query routes a path to, or undefined: Apache's
 * mod_rewrite (without the B flag) decodes the path and puts it into `index.php?q=$1` as it is,
 * nginx its `$uri` (and a capture from a path without escapes), so a `&` in the decoded path starts another
 * parameter, read as PHP reads it (the last of a repeated name). Only for a path that holds one:
 * elsewhere `q` is the path itself, which the stack above routes already.
 */
function pathAsQuery(rawPath: string): string | undefined {
  const decoded = serverDecoded(rawPath);
  return decoded.includes("&") ? queryRoute(`q=${decoded.slice(1)}`, true) : undefined;
}

/** The path as the lenient stack routes it: the leniencies above, applied in a framework's order, or the path its query routes to (see `queryRoute`, `pathAsQuery`). */
export function routedPath(target: string): string {
  const path = pathRouted(target);
  const query = target.indexOf("?");
  // the front script: the home page, or index.php with more path after it (PATH_INFO), which
  // Drupal 7 and Yii leave unread when the query names the route
  const front = path === "/" || /^\/+index\.php\/.*$/i.test(target.split("?")[0]!);
  const routed = (query < 0 ? undefined : queryRoute(target.slice(query + 1), front)) ?? pathAsQuery(target.split("?")[0]!);
  if (routed === undefined) return path;
  // the application does not resolve the value's dot segments: CodeIgniter 3 drops them, Drupal 7
  // routes by the longest registered prefix (user/login/../.. is user/login)
  const undotted = routed
    .replace(/[?#].*/s, "")
    .split("/")
    .filter((segment) => !/^(?:\.|%2e)+$/i.test(segment));
  return pathRouted(undotted.join("/") || "/");
}

function pathRouted(target: string): string {
  let path = target.split("?")[0]!;
  try {
    path = decodeURI(path);
  } catch {
    // Hono keeps what does not decode
  }
  path = posix.normalize(path.replace(/;[^/]*/g, ""));
  if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1);
  path = routerDataPage(nextPage(path));
  // IIS drops trailing dots from every segment; Rails' (.:format) takes the last segment from its
  // first dot on (`[^./?]+` for the action), Spring's suffix matching (`pattern.*`) any suffix
  const segments = path.split("/").map((segment) => segment.replace(/\.+$/, ""));
  const last = segments.at(-1)!;
  // a directory's index script is what runs for the directory (Apache's DirectoryIndex, nginx's index)
  // and a controller's default action is the controller's own path (ASP.NET MVC, CakePHP, CodeIgniter, Yii)
  if (INDEX_SCRIPT.test(last) || /^index$/i.test(last)) segments.pop();
  else if (last.indexOf(".") > 0) segments[segments.length - 1] = last.slice(0, last.indexOf("."));
  path = segments.join("/") || "/";
  return path.toLowerCase();
}

/**
 * The page a Next.js request for a page's data or segments is routed as, or `path` itself: Next's
 * NextDataPathnameNormalizer takes `/_next/data/<build id>` and `.json` off a data route, then
 * reads `/index` as `/` (`next start` without a deployment ID); its
 * SegmentPrefixRSCPathnameNormalizer routes `<page>.segments/<segment>.segment.rsc` as `<page>`.
 */
function nextPage(path: string): string {
  const data = /^\/_next\/data\/[^/]+(\/.+)\.json$/.exec(path);
  if (data) return data[1] === "/index" ? "/" : data[1]!.replace(/^\/index\//, "/");
  return /^(\/.*?)\.segments\/.*\.segment\.rsc$/.exec(path)?.[1] ?? path;
}

/**
 * The page a SvelteKit or React Router request for a page's data is routed as, or `path` itself:
 * SvelteKit's `strip_data_suffix` takes `/__data.json` off (`/` when nothing is left); React
 * Router's `getNormalizedPath` reads `/_root.data` as the home page and, with
 * `v8_trailingSlashAwareDataRequests`, `<page>/_.data` as `<page>/`; Nuxt's renderer renders
 * `<page>/_payload.json` as `<page>` (`/` when nothing is left); Gatsby's `serve` routes
 * `/page-data/<page>/page-data.json` as `<page>` (`index` as `/`: reverseFixedPagePath); Qwik
 * City's getRouteMatchPathname `<page>/q-data.json` as `<page>`.
 */
function routerDataPage(path: string): string {
  const gatsby = /^\/page-data\/(.+)\/page-data\.json$/.exec(path);
  if (gatsby) return gatsby[1] === "index" ? "/" : `/${gatsby[1]}`;
  const data = /^(.*)\/(?:__data\.json|_root\.data|_\.data|_payload\.js(?:on)?|q-data\.json)$/.exec(path);
  return data ? data[1] || "/" : path;
}

export async function startFrameworkOrigin(): Promise<FrameworkOrigin> {
  const counts = new Map<string, number>();
  const count = (handler: string) => counts.set(handler, (counts.get(handler) ?? 0) + 1);

  const app = new Hono({ getPath: (request) => routedPath(request.url.slice(request.url.indexOf("/", "http://".length))) });
  app.use("*", methodOverride({ app, header: "X-HTTP-Method-Override" }));
  app.use("*", methodOverride({ app, form: "_method" }));
  app.use("*", methodOverride({ app, query: "_method" }));
  const handler = (name: string) => (c: Context) => {
    count(name);
    const raw = c.req.raw;
    const echo: Echo = {
      handler: name,
      method: c.req.method,
      target: raw.headers.get("x-origin-target") ?? "",
      headers: Object.fromEntries([...raw.headers].filter(([k]) => !k.startsWith("x-origin-"))),
      rawHeaders: JSON.parse(raw.headers.get("x-origin-raw-headers") ?? "[]") as string[],
      bodyBytes: Number(raw.headers.get("x-origin-body-bytes") ?? 0),
    };
    return c.json(echo, 200, { "x-handler": name });
  };
  app.get("/v1", handler("v1"));
  app.get("/wp-json/*", handler("wp-json"));
  app.get("/user/login", handler("login"));
  app.get("/v1/users", handler("users"));
  app.delete("/v1/users/:id", handler("delete-user"));
  app.on(["PUT", "PATCH"], "/v1/users/:id", handler("update-user"));
  app.get("/v1/socket", handler("socket-without-upgrade"));
  // an answer with many headers the gate must drop (its own names), two cookies and a body
  app.get("/v1/many-headers", () => {
    count("many-headers");
    const headers = new Headers({ "x-kept": "yes", "content-type": "text/plain" });
    for (let i = 0; i < 40; i++) headers.append(`x-slidegate-forged-${i}`, "1");
    headers.append("set-cookie", "a=1; Path=/");
    headers.append("set-cookie", "b=2, with a comma; Path=/");
    return new Response("the body", { status: 201, statusText: "Made", headers });
  });
  app.all("*", handler("echo"));

  const server = createServer((req, res) => {
    // an origin that failed to answer must say so in its answer: a rejection here would reach
    // no test but fail whichever one happens to be running
    serve(req, res).catch((error: unknown) => {
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end(`framework origin: ${String(error)}`);
    });
  });
  async function serve(req: IncomingMessage, res: ServerResponse) {
    // undici builds no Request of a TRACE (a forbidden method of the fetch standard, with
    // CONNECT and TRACK, which node:http never hands a request handler), so the app cannot
    // route one: answered as servers that disable TRACE (Apache's TraceEnable off) answer it
    if (req.method === "TRACE") {
      req.resume();
      res.writeHead(405, { allow: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", "content-length": "0" });
      res.end();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const headers = new Headers();
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i]!.toLowerCase();
      if (!["host", "connection", "content-length", "transfer-encoding", "keep-alive"].includes(name)) headers.append(name, req.rawHeaders[i + 1]!);
    }
    headers.set("x-origin-target", req.url ?? "/");
    headers.set("x-origin-raw-headers", JSON.stringify(req.rawHeaders));
    headers.set("x-origin-body-bytes", String(body.length));
    const method = req.method ?? "GET";
    const response = await app.fetch(new Request(`http://origin${req.url ?? "/"}`, { method, headers, body: method === "GET" || method === "HEAD" ? undefined : body }));
    // each Set-Cookie as its own field (an object of entries would keep only the last)
    const out: OutgoingHttpHeaders = Object.fromEntries(response.headers);
    if (response.headers.has("set-cookie")) out["set-cookie"] = response.headers.getSetCookie();
    res.writeHead(response.status, response.statusText, out);
    res.end(Buffer.from(await response.arrayBuffer()));
  }

  const sockets = new WebSocketServer({ noServer: true });
  server.on("upgrade", (req, socket, head) => {
    if (routedPath(req.url ?? "/") !== "/v1/socket") return socket.destroy();
    count("socket");
    sockets.handleUpgrade(req, socket, head, (ws) => {
      ws.on("message", (data, binary) => ws.send(binary ? data : `echo: ${data.toString()}`));
    });
  });

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: (handler) => counts.get(handler) ?? 0,
    async close() {
      for (const ws of sockets.clients) ws.terminate();
      sockets.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The Hono application of test/helpers/hono-worker-origin.ts as a Worker in workerd, where it
 * receives the body of a HEAD as a deployed Worker does (Hono on node:http never sees one).
 */
export async function startHonoWorkerOrigin(): Promise<{ url: string; close(): Promise<void> }> {
  const dir = buildWorker({ entry: "test/helpers/hono-worker-origin.ts", name: "hono-origin" });
  const mf = await startIsolate(dir, {});
  return {
    url: (await mf.ready).href.replace(/\/$/, ""),
    async close() {
      await mf.dispose();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * One HTTP/1.1 request with the request target, header lines and body exactly as given — what
 * `fetch` would normalise or refuse (a repeated header, a GET with a body, `/v1\users`).
 */
export function rawRequest(base: string, options: { method?: string; target: string; headers?: [string, string][]; body?: string }): Promise<RawAnswer> {
  const url = new URL(base);
  // a header array is sent as it is: Node adds no Host of its own
  const headers: string[] = (options.headers ?? []).some(([name]) => name.toLowerCase() === "host") ? [] : ["Host", url.host];
  for (const [name, value] of options.headers ?? []) headers.push(name, value);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, method: options.method ?? "GET", path: options.target, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(options.body);
  });
}

/**
 * Built gates in front of a framework origin of the calling test file's own, started before its
 * tests and stopped after them. Each gate gets a generous store budget: on a loaded machine a
 * decision must not fail open and pass for an evasion.
 *
 * @example
 * const { gate, origin } = frameworkGates();
 * const base = await gate({ rules: [{ name: "users", limit: 1, window: "1m", path: "/v1/*" }] });
 */
export function frameworkGates() {
  let started: FrameworkOrigin | undefined;
  const isolates: Miniflare[] = [];
  beforeAll(async () => {
    started = await startFrameworkOrigin();
  });
  afterAll(async () => {
    await Promise.all(isolates.map((mf) => mf.dispose()));
    await started?.close();
  });
  const origin = () => started!;
  /** A gate's base URL; RATE_LIMITS as an object (a fresh prefix and the budget are added) or as the raw string. */
  async function gate(config: Record<string, unknown> | string, bindings: Record<string, string> = {}, log?: (line: string) => void): Promise<string> {
    const RATE_LIMITS = typeof config === "string" ? config : rateLimits({ timeout: 10_000, ...config });
    const mf = await startGateIsolate({ ORIGIN_URL: origin().url, RATE_LIMITS, ...bindings }, log);
    isolates.push(mf);
    return (await mf.ready).href;
  }
  return { gate, origin };
}
