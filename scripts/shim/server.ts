import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createTlsServer } from "node:https";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { BadRequest, type Command, encodeReply, type Json, parseBody, toCommand, toCommands } from "./codec.ts";
import { isLoopback } from "./loopback.ts";
import { createScriptRegistry, type Translation } from "./lua-flags.ts";
import { refusal } from "./policy.ts";
import { type ClusterAuth, createClusterPool, createPool, type RedisPool, RedisUnavailable, type Replies, ShimBusy } from "./pool.ts";

const TIMED_OUT = /timed out/i;

import { createSemantics } from "./semantics.ts";
import { createStreams, streamRoute } from "./streams.ts";

export interface ShimOptions {
  token: string;
  /** a second token accepted too, while clients move from it to `token` */
  previousToken?: string;
  redisUrl?: string;
  /** host:port of Redis Cluster nodes: cluster mode, instead of redisUrl */
  clusterNodes?: string[];
  /** what the cluster's nodes ask a client to AUTH with (`requirepass`, or an ACL user's) */
  clusterAuth?: ClusterAuth;
  /** default 127.0.0.1: the shim is for this machine unless told otherwise */
  host?: string;
  /** default 0: any free port */
  port?: number;
  /** largest request body in bytes (default 1 MiB) */
  bodyLimit?: number;
  poolSize?: number;
  commandTimeoutMs?: number;
  /** most /multi-exec transactions holding a Redis connection at once (default 16) */
  maxTransactions?: number;
  /** most transactions waiting for one (default 4 × maxTransactions) */
  transactionQueue?: number;
  /** most /subscribe, /psubscribe and /monitor streams open at once (default 64) */
  maxStreams?: number;
  /** bytes a stream holds for a client that does not read before it is cut (default 8 MiB) */
  streamBacklog?: number;
  /** most client connections open at once; one more is closed as it arrives (default DEFAULT_MAX_CONNECTIONS) */
  maxConnections?: number;
  /** a connection that sends no request for this long is closed (default 60 s) */
  idleTimeoutMs?: number;
  /** serve HTTPS with this certificate chain and key (PEM) */
  tls?: { cert: string | Buffer; key: string | Buffer };
  log?: (line: string) => void;
}

export interface RunningShim {
  url: string;
  /** the Redis URL with any password removed, fit to print */
  redis: string;
  close(): Promise<void>;
}

export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";

/** Shortest token the shim takes when it listens beyond loopback: what the gate asks of its admin token. */
export const MIN_REMOTE_TOKEN_LENGTH = 32;

/**
 * Why `token` (named `name`) will not do on `host`, or undefined: beyond loopback anyone who
 * can reach the port may guess at it, so it must be as long as the gate's admin token. On
 * loopback any token goes (local development and tests use short ones).
 */
export function weakToken(name: string, token: string | undefined, host: string): string | undefined {
  if (token === undefined || token === "" || token.length >= MIN_REMOTE_TOKEN_LENGTH || isLoopback(host)) return undefined;
  return `${name} is ${token.length} characters: listening on ${host}, beyond loopback, it must be at least ${MIN_REMOTE_TOKEN_LENGTH} (a random one: openssl rand -hex ${MIN_REMOTE_TOKEN_LENGTH}). Any token is taken on 127.0.0.1.`;
}

/**
 * Why `token` (named `name`) can never arrive in an Authorization header as it is, or undefined.
 * HTTP strips whitespace from a header value's end, and no header carries a control character
 * (a tab aside) or a character past U+00FF: a shim started with such a token, from a token file
 * with Windows line endings say, would answer every request 401 and never say why.
 */
export function unpresentableToken(name: string, token: string | undefined): string | undefined {
  if (!token) return undefined;
  if (/[ \t\r\n]$/.test(token))
    return `${name} ends with whitespace (a space, or a line break from the file it was read from), which HTTP strips from a header: no client could present it`;
  for (const char of token) {
    const code = char.codePointAt(0)!;
    if ((code < 0x20 && char !== "\t") || code === 0x7f)
      return `${name} holds a control character (such as a line break), which no HTTP header may carry: no client could present it`;
    if (code > 0xff) return `${name} holds a character past U+00FF, which an HTTP header cannot carry as text: no client could present it`;
  }
  return undefined;
}
const DEFAULT_BODY_LIMIT = 1024 * 1024;
/**
 * Client connections open at once by default. A fleet of isolates under a burst opens one per
 * concurrent call and keeps them alive: at 1024, a test of 4 isolates × 500 concurrent requests
 * ran into the cap, the calls past it were store failures, and the rules failed open. Each
 * silent connection holds about 4 KB.
 */
export const DEFAULT_MAX_CONNECTIONS = 16_384;
/** A 401's challenge: HTTP requires one (RFC 9110, 15.5.2), naming the scheme the shim takes. */
const UNAUTHORIZED_HEADERS = { "www-authenticate": "Bearer" };
/** Requests of one connection running at once (see the listener). */
const PIPELINE_DEPTH = 16;
/** A body up to this many times the limit is read to its end before the 413, so a client that
 * only reads once it has sent everything still gets it; past that, the 413 goes out at once. */
const DRAIN_FACTOR = 16;

/** The 413; `early` when it goes out before the body has ended, so the connection closes after it. */
class BodyTooLarge extends BadRequest {
  readonly early: boolean;
  constructor(limit: number, early: boolean) {
    super(`ERR request body is larger than the limit of ${limit} bytes`, 413);
    this.early = early;
  }
}

/** The client went away before its request was read: nobody is left to answer, and nothing went wrong here. */
class ClientGone extends Error {}

// fatal: bytes that are not UTF-8 are refused, where toString("utf8") would store U+FFFD in
// their place; ignoreBOM keeps a BOM as text, for JSON.parse to refuse as it always has
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * What Node would answer in bare text to a request it cannot parse, as JSON: a header block
 * past Node's limit, a chunk extension past it, a request too slow to arrive, or anything
 * else malformed (bad framing, a cut-short body, a line that is not HTTP).
 */
function clientErrorAnswer(code: string | undefined): { status: number; reason: string; error: string } {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return { status: 431, reason: "Request Header Fields Too Large", error: "ERR request headers are larger than the shim accepts" };
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return { status: 413, reason: "Payload Too Large", error: "ERR request chunk extensions are larger than the shim accepts" };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, reason: "Request Timeout", error: "ERR request did not arrive in time" };
    default:
      return { status: 400, reason: "Bad Request", error: "ERR malformed HTTP request" };
  }
}

/**
 * The path of a request target, without a trailing slash. Node passes on an absolute-form
 * target its parser takes but URL does not (`POST http://[::1 HTTP/1.1`): the caller's
 * malformed request, a 400, never the shim's own error.
 */
function requestPath(target: string | undefined): string {
  let url: URL;
  try {
    url = new URL(target ?? "/", "http://shim");
  } catch {
    throw new BadRequest("ERR request target is not a path or URL: POST /, /pipeline or /multi-exec");
  }
  return url.pathname.replace(/(.)\/$/, "$1");
}

/** ioredis takes every query parameter as an option, a password among them (?password=, ?sentinelPassword=). */
function withoutPasswordParameters(params: URLSearchParams): void {
  for (const name of [...params.keys()]) if (/password/i.test(name)) params.delete(name);
}

/**
 * A Redis URL with its password blanked, for logs and banners, read as ioredis reads it (its
 * `parseURL`): a path starting with `/` is a Unix socket's, and a URL without `redis://` or
 * `rediss://` is read as one with `redis://` (`//host` with `redis:`). Read as a WHATWG URL
 * instead, `default:pw@host:6379` is a URL of scheme `default:` with no password, and was
 * printed whole. A fragment, which ioredis ignores, is dropped.
 */
export function redactUrl(url: string): string {
  if (url.startsWith("/") && !url.startsWith("//")) {
    const query = url.indexOf("?");
    if (query < 0) return url;
    const params = new URLSearchParams(url.slice(query + 1));
    withoutPasswordParameters(params);
    return `${url.slice(0, query)}${params.size ? `?${params}` : ""}`;
  }
  try {
    const u = new URL(/^rediss?:\/\//i.test(url) ? url : url.startsWith("//") ? `redis:${url}` : `redis://${url}`);
    withoutPasswordParameters(u.searchParams);
    // an @ after the host: a password holding an unencoded / ? or # ended there, and the rest
    // of it follows (the user name read as the host, the password's first digits as the port)
    if (`${u.pathname}${u.search}${u.hash}`.includes("@")) return "(a Redis URL with an @ after its host: percent-encode any / ? # @ : % in its user name and password)";
    u.password = "";
    u.hash = "";
    return u.href.replace(/\/$/, "");
  } catch {
    return "(unparseable Redis URL)";
  }
}

/** A Redis reply error (wrong type, NOSCRIPT, …) keeps its text; anything else means Redis is unreachable. */
function settle(error: unknown): { error: string } {
  // ioredis (through redis-errors) names Redis's own error replies "ReplyError".
  if (error instanceof Error && error.name === "ReplyError") return { error: error.message };
  throw new RedisUnavailable(error instanceof Error ? error.message : String(error));
}

/**
 * The Upstash REST API in front of a Redis: POST `/` (one command), `/pipeline` and
 * `/multi-exec`, server-sent events at `/subscribe/<channel>`, `/psubscribe/<pattern>` and
 * `/monitor`, bearer-token auth, base64 replies on request, HTTPS when given a certificate.
 * Commands go through the policy (policy.ts) and Upstash's semantics (semantics.ts) first.
 * See the wire contract in the project docs; what Upstash leaves open is decided and
 * commented where it happens.
 *
 * @example
 * const shim = await startShim({ token: "dev-token", redisUrl: "redis://127.0.0.1:6379" });
 * // new Redis({ url: shim.url, token: "dev-token" }) from @upstash/redis now works
 * await shim.close();
 */
/**
 * Says so at start when Redis evicts keys once full: a flood of new callers (every IPv6 /64
 * is one) then evicts what the gate must keep — an operator's block, a key's registry entry,
 * the logs of callers at their limit. `noeviction` fails the script whole instead, and each
 * rule does what its `fail` mode says. Best effort: a Redis that does not answer INFO is not
 * a reason not to start.
 */
async function warnOfEviction(pool: RedisPool, log: (line: string) => void): Promise<void> {
  try {
    const [[error, reply]] = (await pool.exec([["INFO", "memory"]])) as [[Error | null, unknown]];
    if (error) return;
    const info = Buffer.isBuffer(reply) ? (reply as Buffer).toString() : String(reply);
    const policy = /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
    const maxmemory = Number(/^maxmemory:(\d+)/m.exec(info)?.[1] ?? 0);
    if (policy && policy !== "noeviction" && maxmemory > 0) {
      log(
        `slidegate shim: warning: Redis evicts keys when full (maxmemory-policy ${policy}): a flood of new callers can evict operator blocks, registry entries and the logs of callers at their limit. Set maxmemory-policy noeviction (see the README's "In front of a production Redis").`,
      );
    }
  } catch {
    // not a reason not to serve
  }
}

export async function startShim(options: ShimOptions): Promise<RunningShim> {
  if (!options.token) throw new Error("startShim: a token is required");
  const listenHost = options.host ?? "127.0.0.1";
  const weak =
    unpresentableToken("token", options.token) ??
    unpresentableToken("previousToken", options.previousToken) ??
    weakToken("token", options.token, listenHost) ??
    weakToken("previousToken", options.previousToken, listenHost);
  if (weak) throw new Error(`startShim: ${weak}`);
  const redisUrl = options.redisUrl ?? DEFAULT_REDIS_URL;
  const log = options.log ?? ((line) => console.error(line));
  const bodyLimit = options.bodyLimit ?? DEFAULT_BODY_LIMIT;
  const digest = (text: string) => createHash("sha256").update(text).digest();
  const accepted = [options.token, options.previousToken].filter((t): t is string => !!t).map((t) => digest(`Bearer ${t}`));
  const poolOptions = {
    size: options.poolSize,
    commandTimeoutMs: options.commandTimeoutMs,
    maxTransactions: options.maxTransactions,
    transactionQueue: options.transactionQueue,
    onStatus: (event: string, detail: string) => log(`slidegate shim: redis connection ${event}${detail ? `: ${detail}` : ""}`),
  };
  const pool: RedisPool = options.clusterNodes?.length
    ? await createClusterPool(options.clusterNodes, { ...poolOptions, ...options.clusterAuth })
    : await createPool(redisUrl, poolOptions).catch((e: unknown) => {
        // "Connection is closed." said nothing of which Redis, nor why: name both (no password)
        if (e instanceof RedisUnavailable) throw new Error(`cannot reach Redis at ${redactUrl(redisUrl)} (${e.message})`);
        // ioredis's "Invalid URL" (new URL) or "URI malformed" (its decoding of the user name and
        // password) named neither the URL nor what to change
        if (e instanceof URIError || (e as { code?: unknown })?.code === "ERR_INVALID_URL")
          throw new Error(
            `the Redis URL does not parse (${e instanceof Error ? e.message : String(e)}): write it as redis://user:password@host:port, with any / ? # @ : % in the user name or password percent-encoded`,
          );
        throw e;
      });
  await warnOfEviction(pool, log);
  const scripts = createScriptRegistry();
  const semantics = createSemantics(pool);
  const streams = createStreams({ open: pool.dedicated, max: options.maxStreams ?? 64, backlog: options.streamBacklog });
  const session = randomBytes(6).toString("hex");
  let responses = 0;
  // Served requests and Redis commands, for tests and benchmarks that count round trips.
  let requests = 0;
  let commands = 0;

  // Hashing both sides first gives equal lengths, so each compare is constant-time; every
  // accepted token is compared, so the time does not tell which one matched.
  const authorised = (req: IncomingMessage) => {
    // HTTP's authentication scheme is case-insensitive (RFC 9110, 11.1) and followed by 1*SP (11.4):
    // "bearer  <token>" is the token too
    const presented = digest((req.headers.authorization ?? "").replace(/^bearer +/i, "Bearer "));
    return accepted.map((a) => timingSafeEqual(presented, a)).includes(true);
  };

  const readJson = (req: IncomingMessage): Promise<unknown> =>
    new Promise((resolve, reject) => {
      // One buffer, grown by doubling, never a list of the chunks as they came: a body sent in
      // one-byte chunks (chunked encoding) made a million Buffers of a 1 MiB body, about 200 B
      // each, and each kept alive the whole socket read it was cut from.
      let held = Buffer.alloc(0);
      let size = 0;
      // Past the cap the rest is read and dropped, so the client can finish sending and read
      // the 413. Far past it the 413 goes out at once and the connection closes after it.
      req.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size <= bodyLimit) {
          if (size > held.length) {
            const grown = Buffer.allocUnsafe(Math.min(bodyLimit, Math.max(size, 2 * held.length, 16 * 1024)));
            held.copy(grown, 0, 0, size - chunk.length);
            held = grown;
          }
          chunk.copy(held, size - chunk.length);
        } else if (size > DRAIN_FACTOR * bodyLimit && size - chunk.length <= DRAIN_FACTOR * bodyLimit) reject(new BodyTooLarge(bodyLimit, true));
      });
      // the request stream fails only when its connection does ("aborted", ECONNRESET)
      req.on("error", (e) => reject(new ClientGone(e.message)));
      req.on("end", () => {
        if (size > bodyLimit) return reject(new BodyTooLarge(bodyLimit, false));
        let text: string;
        try {
          text = utf8.decode(held.subarray(0, size));
        } catch {
          return reject(new BadRequest("ERR request body is not valid UTF-8: send JSON text encoded as UTF-8"));
        }
        try {
          resolve(parseBody(text));
        } catch (e) {
          reject(new BadRequest(`ERR request body is not valid JSON: ${(e as Error).message}`));
        }
      });
    });

  type Outcome = { result: Json } | { error: string };
  const outcome = (t: Translation, reply: unknown, base64: boolean): Outcome =>
    reply instanceof Error ? settle(reply) : { result: encodeReply(t.reply ? t.reply(reply) : reply, base64) };

  /** Raw [error, reply] pairs, in order. */
  const run = (translated: Translation[], transaction = false): Promise<Replies> => {
    commands += translated.length;
    const list = translated.map((t) => t.command);
    return transaction ? pool.transaction(list) : pool.exec(list);
  };

  /** A request's commands, refused before they reach Redis, or rewritten for Upstash's semantics or script flags. */
  const translator = () => {
    const semanticsOf = semantics.forRequest();
    return async (command: Command): Promise<Translation> => {
      const why = refusal(command);
      if (why) throw new BadRequest(why);
      return (await semanticsOf(command)) ?? scripts.translate(command);
    };
  };

  async function single(body: unknown, base64: boolean) {
    const t = await translator()(toCommand(body, "body"));
    const [[error, reply]] = (await run([t])) as [[Error | null, unknown]];
    const entry = outcome(t, error ?? reply, base64);
    return { status: "error" in entry ? 400 : 200, body: entry };
  }

  async function pipeline(body: unknown, base64: boolean) {
    // A refused command answers for itself; the rest of the batch still runs.
    const translate = translator();
    const prepared = await Promise.all(
      toCommands(body).map((c) =>
        translate(c).catch((e: unknown) => {
          if (e instanceof BadRequest) return e;
          throw e;
        }),
      ),
    );
    const runnable = prepared.filter((p): p is Translation => !(p instanceof BadRequest));
    const results = runnable.length ? await run(runnable) : [];
    let next = 0;
    return {
      status: 200,
      body: prepared.map((p): Outcome => {
        if (p instanceof BadRequest) return { error: p.message };
        const [error, reply] = results[next++]!;
        return outcome(p, error ?? reply, base64);
      }),
    };
  }

  async function multiExec(body: unknown, base64: boolean) {
    const translated = await Promise.all(toCommands(body).map(translator()));
    const results = await run(translated, true);
    const [execError, replies] = results[results.length - 1]!;
    // Discarded as a whole (EXECABORT after a queue-time error): a non-2xx answer, never
    // a 200 whose body is not the per-command array the client maps over.
    if (execError) return { status: 400, body: settle(execError) };
    // Runtime errors arrive as elements of EXEC's array and answer for their command only.
    return { status: 200, body: (replies as unknown[]).map((r, i) => outcome(translated[i]!, r, base64)) };
  }

  const routes: Record<string, (body: unknown, base64: boolean) => Promise<{ status: number; body: unknown }>> = {
    "/": single,
    "/pipeline": pipeline,
    "/multi-exec": multiExec,
  };

  /** `refused`: the answer this request gets whatever it asks, once its token is checked. */
  /** Each connection's latest request's response, for answerOnSocket to tell whether that request has had its answer. */
  const latestResponse = new WeakMap<Duplex, ServerResponse>();

  async function handle(req: IncomingMessage, res: ServerResponse, refused?: BadRequest | ShimBusy) {
    // The request is here: the idle timeout (server.timeout below) is for connections that send
    // none. What follows is bounded by Node's request timeouts and the Redis command timeout, and a
    // stream on a quiet channel may send nothing for hours.
    req.socket.setTimeout(0);
    latestResponse.set(req.socket, res);
    const syncToken = () => `${session}-${++responses}`;
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      // The text before any header: a reply past the longest string V8 makes (Redis holds 512 MB
      // values, and JSON writes a control byte as six characters) throws here, where the catch
      // below can still answer it. Thrown after writeHead, the catch's own answer threw again,
      // out of this handler, and the unhandled rejection ended the process.
      const text = JSON.stringify(body);
      res.writeHead(status, { "content-type": "application/json", "upstash-sync-token": syncToken(), ...headers });
      res.end(text);
    };
    try {
      if (!authorised(req)) return send(401, { error: "Unauthorized" }, UNAUTHORIZED_HEADERS);
      if (refused) throw refused;
      const path = requestPath(req.url);
      if (path === "/__shim/stats" && req.method === "GET") {
        return send(200, { result: { requests, commands, streams: streams.open(), transactions: pool.stats() } });
      }
      const stream = streamRoute(path);
      const route = routes[path];
      if (!route && !stream) return send(404, { error: `ERR unknown path ${path}: use POST /, /pipeline, /multi-exec, /subscribe/<channel>, /psubscribe/<pattern> or /monitor` });
      if (req.method !== "POST") return send(405, { error: `ERR method ${req.method} not allowed: use POST` });
      if (stream) {
        requests++;
        req.resume(); // the client's body ("[]") says nothing the path does not
        return await streams.serve(stream, res, { "upstash-sync-token": syncToken() });
      }
      // Like Upstash, any content type is read as JSON: `curl -d '["PING"]'` sends a form type.
      requests++;
      const body = await readJson(req);
      const base64 = req.headers["upstash-encoding"]?.toString().toLowerCase() === "base64";
      const answer = await route!(body, base64);
      send(answer.status, answer.body);
    } catch (e) {
      if (e instanceof ClientGone) return;
      if (e instanceof BadRequest) return send(e.status, { error: e.message }, e instanceof BodyTooLarge && e.early ? { connection: "close" } : {});
      // the cause in general words: a client's message must not carry Redis's address (ECONNREFUSED 10.0.0.5:6379)
      if (e instanceof RedisUnavailable) return send(503, { error: `ERR redis unavailable${TIMED_OUT.test(e.message) ? ": command timed out" : ""}` });
      if (e instanceof ShimBusy) return send(503, { error: e.message });
      log(`slidegate shim: unexpected error: ${e instanceof Error ? e.stack : String(e)}`);
      send(500, { error: "ERR internal shim error" });
    }
  }

  // HTTP/1.1 lets a client send requests without waiting for answers (pipelining), and Node hands
  // each to the handler as it is parsed. Node stops reading a connection once answers pile up
  // unsent, but a running request has made none yet: a client that sent PINGs and read nothing
  // had tens of thousands running at once, each with its promise and its Redis command (one
  // connection took a shim from 100 MB to 550 MB). Past the depth a request is answered at
  // once; those answers pile up, and Node stops reading.
  const running = new WeakMap<Duplex, number>();
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    const busy = running.get(req.socket) ?? 0;
    if (busy >= PIPELINE_DEPTH) {
      return void handle(req, res, new ShimBusy(`ERR ${busy} requests already running on this connection, the most the shim runs for one: read their answers before sending more`));
    }
    running.set(req.socket, busy + 1);
    void handle(req, res).finally(() => running.set(req.socket, (running.get(req.socket) ?? 1) - 1));
  };
  const server = options.tls ? createTlsServer({ cert: options.tls.cert, key: options.tls.key }, listener) : createServer(listener);
  // Node answers an Expect header other than 100-continue with a bare 417 of its own, before any
  // token is checked; the contract wants every non-2xx body in JSON, and a 401 first.
  server.on(
    "checkExpectation",
    (req: IncomingMessage, res: ServerResponse) => void handle(req, res, new BadRequest("ERR the shim meets no Expect header but 100-continue: send the request without it", 417)),
  );
  // Node answers Expect: 100-continue with a 100 of its own before any handler runs, which asks
  // a client without the token to send its whole body only to be told 401: the 100 goes only to
  // a client with the token, and the others get their 401 at once.
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    if (authorised(req)) res.writeContinue();
    listener(req, res);
  });
  server.keepAliveTimeout = 30_000;
  // Node times a request out once its first byte arrives (headersTimeout) and a kept-alive
  // connection between requests (keepAliveTimeout), but never a connection that sends nothing
  // at all: anyone who can reach the port, token or not, could hold sockets open for ever.
  // server.timeout is inactivity until the first request arrives (handle turns it off, and
  // after an answer keepAliveTimeout takes over).
  server.timeout = options.idleTimeoutMs ?? 60_000;
  // Every connection holds a socket, a file descriptor and buffers (12 KB with a half-sent header
  // block, up to the body limit with a body), and anyone who can reach the port may open them,
  // token or not. Past the cap Node closes a new one unanswered: a fetch that fails so is one
  // the official client retries, where a 503 would not be.
  const maxConnections = options.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  server.maxConnections = maxConnections;
  // An operator must be able to tell refused connections from a network fault, without a line
  // for each in a flood: one line a minute at most, with the count.
  let dropped = 0;
  let droppedSaidAt = Number.NEGATIVE_INFINITY;
  server.on("drop", () => {
    dropped++;
    if (Date.now() - droppedSaidAt < 60_000) return;
    log(
      `slidegate shim: ${dropped} new connection${dropped === 1 ? "" : "s"} closed unanswered since the last such line: ${maxConnections} are open, the most SHIM_MAX_CONNECTIONS allows`,
    );
    dropped = 0;
    droppedSaidAt = Date.now();
  });
  /**
   * A JSON answer written on the socket itself, where Node has no response to give the handler
   * (a request it cannot parse, a CONNECT), then the connection closed.
   */
  const answerOnSocket = (socket: Duplex, status: number, reason: string, error: string) => {
    // Never in the middle of a response already under way (raw bytes there would corrupt it),
    // nor while one is owed to a request that arrived whole (a pipelined one still running, and
    // these bytes a later one's): the client would pair this answer with that request, which
    // may well have run. Closing leaves its outcome unknown, which is the truth. A request
    // whose own body is malformed has not arrived whole: it gets this answer, unless it has had
    // one already (a 401 or a 404 goes out before the body is read, and Node reads the rest
    // after it): a second answer there would be read as the next request's.
    const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
    const latest = latestResponse.get(socket);
    if (!socket.writable || inFlight?.headersSent || inFlight?.req?.complete || (latest?.writableEnded && !latest.req.complete)) {
      socket.destroy();
      return;
    }
    const body = JSON.stringify({ error });
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n${status === 401 ? "www-authenticate: Bearer\r\n" : ""}upstash-sync-token: ${session}-${++responses}\r\n\r\n${body}`,
    );
    // end() only half-closes (the server's sockets allow half-open ones): a client that never
    // closes its side must not hold the socket; the delay lets the answer reach it first
    setTimeout(() => socket.destroy(), 1000).unref();
  };
  // Node's own answer here is a bare status line; the contract wants every non-2xx body in JSON.
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code === "ECONNRESET") return socket.destroy();
    const { status, reason, error } = clientErrorAnswer(err.code);
    answerOnSocket(socket, status, reason, error);
  });
  // Without a listener Node closes a CONNECT's connection without a word. The shim is no proxy.
  server.on("connect", (req: IncomingMessage, socket: Duplex) => {
    // Node hands the socket over with none of its own listeners: a reset now must not go unheard
    socket.on("error", () => socket.destroy());
    if (!authorised(req)) return answerOnSocket(socket, 401, "Unauthorized", "Unauthorized");
    answerOnSocket(socket, 405, "Method Not Allowed", "ERR method CONNECT not allowed: the shim is no proxy; use POST");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, listenHost, resolve);
  });
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `${options.tls ? "https" : "http"}://${host}:${address.port}`,
    redis: options.clusterNodes?.length ? `cluster ${options.clusterNodes.join(",")}` : redactUrl(redisUrl),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await pool.close();
    },
  };
}
