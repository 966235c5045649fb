import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { BadRequest, encodeReply, toCommand, toCommands, type Command, type Json } from "./codec.ts";
import { refusal } from "./commands.ts";
import { createScriptRegistry, type Translation } from "./lua-flags.ts";
import { createClusterPool, createPool, RedisUnavailable, type RedisPool, type Replies } from "./pool.ts";

export interface ShimOptions {
  token: string;
  redisUrl?: string;
  /** host:port of Redis Cluster nodes: cluster mode, instead of redisUrl */
  clusterNodes?: string[];
  /** default 127.0.0.1: the shim is for this machine unless told otherwise */
  host?: string;
  /** default 0: any free port */
  port?: number;
  /** largest request body in bytes (default 1 MiB) */
  bodyLimit?: number;
  poolSize?: number;
  commandTimeoutMs?: number;
  log?: (line: string) => void;
}

export interface RunningShim {
  url: string;
  /** the Redis URL with any password removed, fit to print */
  redis: string;
  close(): Promise<void>;
}

export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";
const DEFAULT_BODY_LIMIT = 1024 * 1024;

/** A Redis URL with its password blanked, for logs and banners. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    u.password = "";
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
 * `/multi-exec`, bearer-token auth, base64 replies on request. See the wire contract in
 * the project docs; what Upstash leaves open is decided and commented where it happens.
 *
 * @example
 * const shim = await startShim({ token: "dev-token", redisUrl: "redis://127.0.0.1:6379" });
 * // new Redis({ url: shim.url, token: "dev-token" }) from @upstash/redis now works
 * await shim.close();
 */
export async function startShim(options: ShimOptions): Promise<RunningShim> {
  if (!options.token) throw new Error("startShim: a token is required");
  const redisUrl = options.redisUrl ?? DEFAULT_REDIS_URL;
  const log = options.log ?? ((line) => console.error(line));
  const bodyLimit = options.bodyLimit ?? DEFAULT_BODY_LIMIT;
  const expected = createHash("sha256").update(`Bearer ${options.token}`).digest();
  const poolOptions = {
    size: options.poolSize,
    commandTimeoutMs: options.commandTimeoutMs,
    onStatus: (event: string, detail: string) => log(`slidegate shim: redis connection ${event}${detail ? `: ${detail}` : ""}`),
  };
  const pool: RedisPool = options.clusterNodes?.length ? await createClusterPool(options.clusterNodes, poolOptions) : await createPool(redisUrl, poolOptions);
  const scripts = createScriptRegistry();
  const session = randomBytes(6).toString("hex");
  let responses = 0;
  // Served requests and Redis commands, for tests and benchmarks that count round trips.
  let requests = 0;
  let commands = 0;

  // Hashing both sides first gives equal lengths, so the compare is constant-time.
  const authorised = (req: IncomingMessage) =>
    timingSafeEqual(createHash("sha256").update(req.headers.authorization ?? "").digest(), expected);

  const readJson = (req: IncomingMessage): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      // Past the cap the rest is read and dropped, so the client can finish sending and
      // read the 413; only a body far past it has its connection cut.
      req.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size <= bodyLimit) chunks.push(chunk);
        else if (size > 16 * bodyLimit) req.destroy();
      });
      req.on("error", reject);
      req.on("end", () => {
        if (size > bodyLimit) return reject(new BadRequest(`ERR request body is larger than the limit of ${bodyLimit} bytes`, 413));
        const text = Buffer.concat(chunks).toString("utf8");
        try {
          resolve(JSON.parse(text));
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

  const translate = (command: Command): Translation => {
    const why = refusal(command);
    if (why) throw new BadRequest(why);
    return scripts.translate(command);
  };

  async function single(body: unknown, base64: boolean) {
    const t = translate(toCommand(body, "body"));
    const [[error, reply]] = (await run([t])) as [[Error | null, unknown]];
    const entry = outcome(t, error ?? reply, base64);
    return { status: "error" in entry ? 400 : 200, body: entry };
  }

  async function pipeline(body: unknown, base64: boolean) {
    // A refused command answers for itself; the rest of the batch still runs.
    const prepared = toCommands(body).map((c) => {
      try {
        return translate(c);
      } catch (e) {
        if (e instanceof BadRequest) return e;
        throw e;
      }
    });
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
    const translated = toCommands(body).map(translate);
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

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json", "upstash-sync-token": `${session}-${++responses}` });
      res.end(JSON.stringify(body));
    };
    try {
      const path = new URL(req.url ?? "/", "http://shim").pathname.replace(/(.)\/$/, "$1");
      if (!authorised(req)) return send(401, { error: "Unauthorized" });
      if (path === "/__shim/stats" && req.method === "GET") return send(200, { result: { requests, commands } });
      const route = routes[path];
      if (!route) return send(404, { error: `ERR unknown path ${path}: use POST /, /pipeline or /multi-exec` });
      if (req.method !== "POST") return send(405, { error: `ERR method ${req.method} not allowed: use POST` });
      // Like Upstash, any content type is read as JSON: `curl -d '["PING"]'` sends a form type.
      requests++;
      const body = await readJson(req);
      const base64 = req.headers["upstash-encoding"]?.toString().toLowerCase() === "base64";
      const answer = await route(body, base64);
      send(answer.status, answer.body);
    } catch (e) {
      if (e instanceof BadRequest) return send(e.status, { error: e.message });
      if (e instanceof RedisUnavailable) return send(503, { error: `ERR redis unavailable: ${e.message}` });
      log(`slidegate shim: unexpected error: ${e instanceof Error ? e.stack : String(e)}`);
      send(500, { error: "ERR internal shim error" });
    }
  }

  const server = createServer((req, res) => void handle(req, res));
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", resolve);
  });
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    redis: options.clusterNodes?.length ? `cluster ${options.clusterNodes.join(",")}` : redactUrl(redisUrl),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await pool.close();
    },
  };
}
