import type { ServerResponse } from "node:http";
import type Redis from "ioredis";
import { BadRequest } from "./codec.ts";
import { RedisUnavailable, ShimBusy } from "./pool.ts";

/**
 * Server-sent events for what turns a Redis connection into a stream, as @upstash/redis reads
 * them: POST /subscribe/<channel> and /psubscribe/<pattern> answer `data: subscribe,<ch>,<count>`
 * (or `psubscribe,…`) once Redis confirms, then `data: message,<ch>,<text>` (or
 * `pmessage,<pattern>,<ch>,<text>`) per message, payloads as UTF-8 text. POST /monitor answers
 * `data: OK`, then one `data: <time> [<db> <client>] "<arg>" …` line per command Redis runs.
 *
 * Every stream has a Redis connection of its own (two subscribers to one channel each see
 * count 1), closed when the client goes away; a stream ends when its Redis connection does,
 * and when its client falls more than `backlog` bytes behind (the shim would otherwise hold
 * everything a stalled reader has not taken). A text with line breaks goes out as one
 * `data:` line per line, as SSE defines it.
 */

export type StreamKind = "subscribe" | "psubscribe" | "monitor";

export interface StreamOptions {
  /** a connection of the stream's own, not yet connected */
  open: () => Redis;
  /** most streams open at once */
  max: number;
  /** bytes a stream may hold for a client that does not read (default 8 MiB) */
  backlog?: number;
}

/** `kind` and its channel or pattern from a request path, or undefined for any other path. */
export function streamRoute(path: string): { kind: StreamKind; target?: string } | undefined {
  if (path === "/monitor") return { kind: "monitor" };
  const match = /^\/(p?subscribe)(?:\/(.*))?$/.exec(path);
  if (!match) return undefined;
  let target: string;
  try {
    target = decodeURIComponent(match[2] ?? "");
  } catch {
    throw new BadRequest(`ERR ${match[1]} target in ${path} is not valid percent-encoding`);
  }
  if (target === "") throw new BadRequest(`ERR ${match[1]} needs a channel or pattern: POST /${match[1]}/<name>`);
  return { kind: match[1] as StreamKind, target };
}

const event = (line: string) =>
  `${line
    .split(/\r\n|\r|\n/)
    .map((l) => `data: ${l}\n`)
    .join("")}\n`;

/**
 * @example
 * const streams = createStreams({ open: pool.dedicated, max: 64 });
 * await streams.serve({ kind: "subscribe", target: "news" }, res, { "upstash-sync-token": "…" });
 */
export function createStreams(options: StreamOptions) {
  let active = 0;

  /** Opens the stream; throws (before any byte is sent) when it cannot, so the caller answers JSON. */
  async function serve(route: { kind: StreamKind; target?: string }, res: ServerResponse, headers: Record<string, string>) {
    if (active >= options.max) {
      throw new ShimBusy(`ERR too many open streams: this shim serves at most ${options.max} at once (SHIM_MAX_STREAMS)`);
    }
    active++;
    const connection = options.open();
    let monitor: Redis | undefined;
    let started = false;
    let closed = false;
    let gone = false; // the client left
    const early: string[] = [];
    const backlog = options.backlog ?? 8 * 1024 * 1024;
    const send = (line: string) => {
      if (!started) return early.push(line);
      res.write(event(line));
      if (res.writableLength > backlog) close(true);
    };
    /** `abrupt`: cut the connection, for a reader so far behind that an end() would never drain */
    const close = (abrupt = false) => {
      if (closed) return;
      closed = true;
      active--;
      connection.disconnect();
      monitor?.disconnect();
      if (started && !res.writableEnded) {
        if (abrupt) res.destroy();
        else res.end();
      }
    };
    res.on("close", () => {
      gone = true;
      close();
    });
    connection.on("error", () => {}); // a lost connection ends the stream through "end"
    connection.on("end", () => close());
    // Listening before subscribing: a message may arrive in the same read as the confirmation.
    connection.on("message", (channel: string, message: string) => send(`message,${channel},${message}`));
    connection.on("pmessage", (pattern: string, channel: string, message: string) => send(`pmessage,${pattern},${channel},${message}`));

    let first: string;
    try {
      if (route.kind === "monitor") {
        monitor = await connection.monitor();
        monitor.on("error", () => {});
        monitor.on("end", () => close());
        monitor.on("monitor", (time: string, args: string[], source: string, database: string) =>
          send(`${time} [${database} ${source}] ${args.map((a) => JSON.stringify(a)).join(" ")}`),
        );
        first = "OK";
      } else {
        await connection.connect();
        const count = route.kind === "subscribe" ? await connection.subscribe(route.target!) : await connection.psubscribe(route.target!);
        first = `${route.kind},${route.target},${count}`;
      }
    } catch (e) {
      close();
      if (gone) return;
      // Redis's own refusal (NOPERM from an ACL, say) keeps its text, as a command error does.
      if (e instanceof Error && e.name === "ReplyError") throw new BadRequest(e.message);
      throw new RedisUnavailable(e instanceof Error ? e.message : String(e));
    }
    if (gone) return; // the client left while Redis was answering
    if (closed) throw new RedisUnavailable("the connection to Redis ended");
    res.writeHead(200, { ...headers, "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    started = true;
    res.write(event(first));
    for (const line of early.splice(0)) res.write(event(line));
  }

  return { serve, open: () => active };
}
