import { connect } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type OwnShim, startOwnShim } from "../helpers/shim.ts";
import { until } from "../helpers/until.ts";

// A Redis and shim of this file's own: the tests count subscriber connections on the Redis
// and open streams up to the shim's cap, which no other file may disturb.
const MAX_STREAMS = 3;
const BACKLOG = 256 * 1024;
let own: OwnShim;
beforeAll(async () => {
  own = await startOwnShim({ maxStreams: MAX_STREAMS, streamBacklog: BACKLOG });
});
afterAll(async () => {
  await own?.close();
});

/** The first value `register` hands its listener. */
const first = <T>(register: (listener: (value: T) => void) => void) => new Promise<T>((resolve) => register(resolve));

/** Redis connections in subscriber mode (sub=/psub= above 0) and in MONITOR (flag O). */
async function streamConnections(): Promise<{ subscribers: number; monitors: number }> {
  const lines = ((await own.admin.call("CLIENT", "LIST")) as string).trim().split("\n");
  return {
    subscribers: lines.filter((l) => / (sub|psub)=[1-9]/.test(l)).length,
    monitors: lines.filter((l) => / flags=\S*O/.test(l)).length,
  };
}

/** A server-sent-event stream read by hand, for what the client has no API for. */
async function openStream(path: string) {
  const controller = new AbortController();
  const res = await fetch(own.shim.url + path, {
    method: "POST",
    body: "[]",
    headers: { authorization: `Bearer ${own.token}`, accept: "text/event-stream" },
    signal: controller.signal,
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  return {
    res,
    /** the next `data:` line's payload that matches, skipping the others */
    async next(match: RegExp = /.*/): Promise<string | undefined> {
      for (;;) {
        const newline = buffer.indexOf("\n");
        if (newline >= 0) {
          const line = buffer.slice(0, newline);
          buffer = buffer.slice(newline + 1);
          if (line.startsWith("data: ") && match.test(line.slice(6))) return line.slice(6);
          continue;
        }
        const { value, done } = await reader.read();
        if (done) return undefined;
        buffer += decoder.decode(value, { stream: true });
      }
    },
    close: () => controller.abort(),
  };
}

const channel = (name: string) => `stream:${name}:${crypto.randomUUID()}`;

describe("shim streams through @upstash/redis", () => {
  it("subscribes: count 1 once Redis confirms, then each message as text, JSON decoded by the client", async () => {
    const redis = own.client();
    const ch = channel("one");
    const sub = redis.subscribe(ch);
    const messages: unknown[] = [];
    sub.on("message", (m) => messages.push(m));
    expect(await first<number>((l) => sub.on("subscribe", l))).toBe(1);

    expect(await redis.publish(ch, "plain, with commas ü")).toBe(1);
    expect(await redis.publish(ch, { n: 1, text: "json" })).toBe(1);
    await until("two messages arrived", () => messages.length === 2);
    expect(messages).toEqual([
      { channel: ch, message: "plain, with commas ü" },
      { channel: ch, message: { n: 1, text: "json" } },
    ]);
    await sub.unsubscribe();
  });

  it("gives two subscribers to one channel a connection each: each sees count 1 and every message", async () => {
    const redis = own.client();
    const ch = channel("two");
    const a = redis.subscribe<string>(ch);
    const b = redis.subscribe<string>(ch);
    const seen: Record<string, unknown[]> = { a: [], b: [] };
    a.on("message", ({ message }) => seen.a!.push(message));
    b.on("message", ({ message }) => seen.b!.push(message));
    const counts = await Promise.all([first<number>((l) => a.on("subscribe", l)), first<number>((l) => b.on("subscribe", l))]);
    expect(counts).toEqual([1, 1]);
    expect((await streamConnections()).subscribers).toBe(2);

    expect(await redis.publish(ch, "to both")).toBe(2);
    await until("both got it", () => seen.a!.length === 1 && seen.b!.length === 1);
    expect(seen).toEqual({ a: ["to both"], b: ["to both"] });
    await Promise.all([a.unsubscribe(), b.unsubscribe()]);
  });

  it("psubscribes: count 1, then pmessage with the pattern and the channel it matched", async () => {
    const redis = own.client();
    const prefix = channel("pattern");
    const sub = redis.psubscribe(`${prefix}:*`);
    const messages: unknown[] = [];
    sub.on("pmessage", (m) => messages.push(m));
    expect(await first<number>((l) => sub.on("psubscribe", l))).toBe(1);
    expect(await redis.publish(`${prefix}:orders`, { id: 7 })).toBe(1);
    expect(await redis.publish(`other:${prefix}`, { id: 8 })).toBe(0);
    await until("the matching message arrived", () => messages.length === 1);
    expect(messages).toEqual([{ pattern: `${prefix}:*`, channel: `${prefix}:orders`, message: { id: 7 } }]);
    await sub.unsubscribe();
  });

  it("frees the Redis connection when a client unsubscribes or simply goes away", async () => {
    const redis = own.client();
    const ch = channel("free");
    await until("earlier streams are gone", async () => (await own.stats()).streams === 0 && (await streamConnections()).subscribers === 0);

    const sub = redis.subscribe(ch);
    await first<number>((l) => sub.on("subscribe", l));
    expect((await own.stats()).streams).toBe(1);
    expect((await streamConnections()).subscribers).toBe(1);
    await sub.unsubscribe();
    await until("the unsubscribed connection is closed", async () => (await streamConnections()).subscribers === 0);
    expect((await own.stats()).streams).toBe(0);
    expect(await redis.publish(ch, "nobody")).toBe(0);

    const raw = await openStream(`/subscribe/${encodeURIComponent(ch)}`);
    expect(await raw.next()).toBe(`subscribe,${ch},1`);
    expect((await streamConnections()).subscribers).toBe(1);
    raw.close(); // the client is gone: no unsubscribe, just a closed socket
    await until("the abandoned connection is closed", async () => (await streamConnections()).subscribers === 0);
    expect((await own.stats()).streams).toBe(0);
  });

  it("caps open streams and says so beyond the cap; a freed place serves again", async () => {
    const redis = own.client();
    const ch = channel("cap");
    const subs = Array.from({ length: MAX_STREAMS }, () => redis.subscribe(ch));
    await Promise.all(subs.map((s) => first<number>((l) => s.on("subscribe", l))));
    const over = redis.subscribe(ch);
    const error = await first<Error>((l) => over.on("error", l));
    expect(error.message).toMatch(`too many open streams: this shim serves at most ${MAX_STREAMS} at once (SHIM_MAX_STREAMS)`);
    const rawOver = await fetch(`${own.shim.url}/monitor`, { method: "POST", headers: { authorization: `Bearer ${own.token}` } });
    expect(rawOver.status).toBe(503);
    expect(await rawOver.json()).toEqual({ error: expect.stringMatching(/^ERR too many open streams/) });
    expect((await streamConnections()).subscribers).toBe(MAX_STREAMS);

    await subs[0]!.unsubscribe();
    await until("a place is free", async () => (await own.stats()).streams === MAX_STREAMS - 1);
    const again = redis.subscribe(ch);
    expect(await first<number>((l) => again.on("subscribe", l))).toBe(1);
    await Promise.all([...subs.slice(1), again, over].map((s) => s.unsubscribe()));
  });
});

describe("shim streams on the wire", () => {
  beforeEach(async () => {
    await until("earlier streams are gone", async () => (await own.stats()).streams === 0);
  });

  it("streams MONITOR: OK, then one line per command Redis runs, until the client leaves", async () => {
    const monitor = await openStream("/monitor");
    expect(monitor.res.status).toBe(200);
    expect(monitor.res.headers.get("content-type")).toBe("text/event-stream");
    expect(await monitor.next()).toBe("OK");
    expect((await streamConnections()).monitors).toBe(1);
    const k = `monitored:${crypto.randomUUID()}`;
    await own.client().set(k, "value");
    expect(await monitor.next(new RegExp(k))).toMatch(new RegExp(`^\\d+\\.\\d+ \\[0 127\\.0\\.0\\.1:\\d+\\] "SET" "${k}" "value"$`));
    monitor.close();
    await until("the monitor connection is closed", async () => (await streamConnections()).monitors === 0);
  });

  it("sends a message with line breaks as one data line per line, and percent-decodes the channel", async () => {
    const ch = `${channel("wire")} with space/and/slash`;
    const stream = await openStream(`/subscribe/${encodeURIComponent(ch)}`);
    expect(await stream.next()).toBe(`subscribe,${ch},1`);
    await own.client().publish(ch, "first line\nsecond line");
    expect(await stream.next()).toBe(`message,${ch},first line`);
    expect(await stream.next()).toBe("second line");
    stream.close();
  });

  it("cuts a stream whose client stops reading, rather than hold everything it has not taken", async () => {
    const ch = channel("stalled");
    const url = new URL(own.shim.url);
    const socket = connect({ host: url.hostname, port: Number(url.port) });
    socket.on("error", () => {}); // the shim cuts it: that is the point
    socket.write(`POST /subscribe/${encodeURIComponent(ch)} HTTP/1.1\r\nhost: shim\r\nauthorization: Bearer ${own.token}\r\ncontent-length: 2\r\n\r\n[]`);
    socket.pause(); // and never read again
    await until("the stalled client is subscribed", async () => (await streamConnections()).subscribers === 1);
    const redis = own.client();
    const payload = "x".repeat(64 * 1024);
    // far more than the backlog and every socket buffer between them
    await until(
      "the shim cuts the stalled stream",
      async () => {
        await redis.publish(ch, payload);
        return (await streamConnections()).subscribers === 0;
      },
      60_000,
    );
    expect((await own.stats()).streams).toBe(0);
    socket.destroy();
  }, 90_000);

  it("answers JSON errors before any stream: 401, 400 for no channel, 405 for GET", async () => {
    const post = (path: string, token = own.token, method = "POST") => fetch(own.shim.url + path, { method, headers: { authorization: `Bearer ${token}` } });
    const unauthorised = await post("/subscribe/x", "wrong");
    expect([unauthorised.status, await unauthorised.json()]).toEqual([401, { error: "Unauthorized" }]);
    const empty = await post("/psubscribe/");
    expect([empty.status, await empty.json()]).toEqual([400, { error: "ERR psubscribe needs a channel or pattern: POST /psubscribe/<name>" }]);
    const get = await post("/monitor", own.token, "GET");
    expect(get.status).toBe(405);
  });

  it("ends a stream when its Redis connection ends, and subscribes again once Redis is back", async () => {
    const ch = channel("down");
    const stream = await openStream(`/subscribe/${encodeURIComponent(ch)}`);
    expect(await stream.next()).toBe(`subscribe,${ch},1`);
    await own.redis.stop();
    expect(await stream.next()).toBeUndefined(); // the response ended
    expect((await own.stats()).streams).toBe(0);
    const down = await fetch(`${own.shim.url}/subscribe/${ch}`, { method: "POST", headers: { authorization: `Bearer ${own.token}` } });
    expect(down.status).toBe(503);
    await own.redis.start();
    await own.admin.ping().catch(() => {});
    const again = await openStream(`/subscribe/${encodeURIComponent(ch)}`);
    expect(await again.next()).toBe(`subscribe,${ch},1`);
    again.close();
  });
});
