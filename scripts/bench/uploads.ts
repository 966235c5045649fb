#!/usr/bin/env node
/**
 * `node scripts/bench/uploads.ts [--reps 3] [--stalled 0,200,500,1000] [--first 1024] [--uploads 10] [--mb 50] [--only memory|cpu] [--build DIR]…`:
 * what reading an upload costs the gate (see `watchedUpload` in src/gateway/proxy.ts) over a
 * Worker that hands the body on (`fetch(origin, request)`), each built as `npm run build` builds
 * it and run in a workerd of its own (Miniflare, as the tests start it). Linux only (/proc).
 *
 * memory: the workerd process's VmRSS with 0, then more, raw-socket uploads open at once, each of
 *   which sent its head (Content-Length: 10000000) and `--first` bytes of body and then stalls; the
 *   origin has seen all of those bytes before RSS is read. The growth over the first level, per upload.
 * cpu: the workerd process's CPU time (user + system, /proc/<pid>/stat, 10 ms ticks) for
 *   `--uploads` uploads of `--mb` MiB each, one after another; per MiB. Wall time beside it.
 *
 * The gate is src/ built now, or each `--build` folder (a copy of `npm run build`'s dist/), so that
 * a change is measured against the build before it in the same run. Each repetition starts a
 * fresh workerd per target and takes the targets in turn, the order rotated, so a busy spell of
 * a shared machine falls on all alike. Not run by `npm run bench`.
 */
import { readFileSync } from "node:fs";
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { connect } from "node:net";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import type { Miniflare } from "miniflare";
import { buildWorker } from "../lib/build-worker.ts";
import { freshRateLimits, startIsolate } from "../lib/fleet.ts";
import { startLocalStack } from "../lib/stack.ts";

const { values } = parseArgs({
  options: {
    reps: { type: "string", default: "3" },
    stalled: { type: "string", default: "0,200,500,1000" },
    uploads: { type: "string", default: "10" },
    mb: { type: "string", default: "50" },
    only: { type: "string" },
    first: { type: "string", default: "1024" },
    build: { type: "string", multiple: true },
  },
});
const reps = Number(values.reps);
const levels = values.stalled!.split(",").map(Number);
const uploads = Number(values.uploads);
const mb = Number(values.mb);
const firstBytes = Number(values.first);

const TICK_MS = 10; // USER_HZ: 100 on Linux

/** The workerd processes now running under this one. */
function workerds(): Set<number> {
  const found = new Set<number>();
  for (const pid of readFileSync(`/proc/self/task/${process.pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number)) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "workerd") found.add(pid);
    } catch {}
  }
  return found;
}
const rssKiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]);
const cpuMs = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS; // utime, stime
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An origin that reads every upload to its end and answers how many bytes came; counts bytes as they come. */
async function startCountingOrigin() {
  let bytes = 0;
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    let n = 0;
    req.on("data", (c: Buffer) => {
      n += c.length;
      bytes += c.length;
    });
    req.on("error", () => {});
    req.on("end", () => res.end(JSON.stringify({ bytes: n })));
  });
  server.maxConnections = 100_000;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen: () => ({ bytes, requests }),
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

interface Target {
  name: string;
  dir: string;
  bindings: Record<string, string>;
}

async function start(t: Target, bindings: Record<string, string>): Promise<{ mf: Miniflare; pid: number; url: URL }> {
  const before = workerds();
  const mf = await startIsolate(t.dir, { ...bindings, ...t.bindings });
  const url = await mf.ready;
  const pid = [...workerds()].find((p) => !before.has(p));
  if (pid === undefined) throw new Error("no new workerd process found");
  return { mf, pid, url };
}

let ipSeq = 0;
const ip = () => `198.18.${(++ipSeq >> 8) & 255}.${ipSeq & 255}`;

/** Opens `n` uploads that each send a head and `firstBytes`, then stall; resolves once the origin has all of those bytes. */
async function stall(url: URL, n: number, origin: Awaited<ReturnType<typeof startCountingOrigin>>, into: Socket[]) {
  const want = origin.seen().bytes + n * firstBytes;
  const first = Buffer.alloc(firstBytes, 0x61);
  for (let i = 0; i < n; i++) {
    const s = connect({ host: url.hostname, port: Number(url.port) });
    s.on("error", () => {});
    s.write(`POST /upload HTTP/1.1\r\nHost: ${url.host}\r\nCF-Connecting-IP: ${ip()}\r\nContent-Length: 10000000\r\n\r\n`);
    s.write(first);
    into.push(s);
    if (i % 50 === 49) await sleep(20);
  }
  const deadline = Date.now() + 60_000;
  while (origin.seen().bytes < want) {
    if (Date.now() > deadline) throw new Error(`origin saw ${origin.seen().bytes} bytes, wanted ${want}`);
    await sleep(50);
  }
}

async function measureMemory(t: Target, bindings: Record<string, string>, origin: Awaited<ReturnType<typeof startCountingOrigin>>) {
  const { mf, pid, url } = await start(t, bindings);
  const sockets: Socket[] = [];
  try {
    // a few uploads sent whole first, so the code paths are warm (compiled, pools filled) before the 0 reading
    for (let i = 0; i < 5; i++) await upload(url, 1 << 20);
    await sleep(1000);
    const rss: Record<number, number> = {};
    for (const level of levels) {
      await stall(url, level - sockets.length, origin, sockets);
      await sleep(1500);
      rss[level] = rssKiB(pid);
    }
    const base = rss[levels[0]!]!;
    const perUpload = Object.fromEntries(levels.filter((l) => l > levels[0]!).map((l) => [l, Math.round(((rss[l]! - base) * 1024) / (l - levels[0]!))]));
    return { rssKiB: rss, bytesPerUpload: perUpload };
  } finally {
    for (const s of sockets) s.destroy();
    await mf.dispose();
  }
}

const chunk = Buffer.alloc(1 << 20, 0x62);

/** One upload of `bytes` (a multiple of 1 MiB) with a Content-Length; the origin's count of what came. */
function upload(url: URL, bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: url.hostname, port: url.port, path: "/upload", method: "POST", headers: { "content-length": bytes, "cf-connecting-ip": "198.19.0.1" }, agent: false },
      (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c));
        res.on("end", () => (res.statusCode === 200 ? resolve((JSON.parse(body) as { bytes: number }).bytes) : reject(new Error(`${res.statusCode} ${body}`))));
      },
    );
    req.on("error", reject);
    let left = bytes / chunk.length;
    const more = () => {
      while (left > 0) {
        left--;
        if (!req.write(chunk)) return void req.once("drain", more);
      }
      req.end();
    };
    more();
  });
}

async function measureCpu(t: Target, bindings: Record<string, string>) {
  const { mf, pid, url } = await start(t, bindings);
  try {
    for (let i = 0; i < 3; i++) await upload(url, 4 << 20); // warm-up
    const cpu0 = cpuMs(pid);
    const t0 = performance.now();
    for (let i = 0; i < uploads; i++) {
      const got = await upload(url, mb << 20);
      if (got !== mb << 20) throw new Error(`the origin got ${got} bytes of ${mb << 20}`);
    }
    const wall = performance.now() - t0;
    const cpu = cpuMs(pid) - cpu0;
    const total = uploads * mb;
    return { cpuMsPerMiB: round(cpu / total), wallMsPerMiB: round(wall / total) };
  } finally {
    await mf.dispose();
  }
}

const round = (x: number) => Number(x.toFixed(2));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
/** The median over the repetitions, the lowest and highest, and each. */
const spread = (xs: number[]) => ({ median: round(median(xs)), min: round(Math.min(...xs)), max: round(Math.max(...xs)), all: xs.map(round) });

/** Samples by target, then by what was measured. */
class Samples {
  readonly by = new Map<string, Map<string, number[]>>();
  add(target: string, what: string, value: number) {
    const of = this.by.get(target) ?? this.by.set(target, new Map()).get(target)!;
    of.set(what, [...(of.get(what) ?? []), value]);
  }
  summary() {
    return Object.fromEntries([...this.by].map(([t, of]) => [t, Object.fromEntries([...of].map(([w, xs]) => [w, spread(xs)]))]));
  }
}

const stack = await startLocalStack({ shimProcess: true });
const origin = await startCountingOrigin();
try {
  const bindings = { ...stack.bindings, ORIGIN_URL: origin.url };
  const gate = { RATE_LIMITS: freshRateLimits({ rules: [{ name: "bench", limit: 1e6, window: "1h" }] }) };
  const builds = values.build?.length ? values.build.map((dir) => ({ name: `slidegate ${dir}`, dir })) : [{ name: "slidegate", dir: buildWorker() }];
  const targets: Target[] = [
    { name: "pass-through", dir: buildWorker({ entry: "scripts/bench/pass-through-worker.ts", name: "pass-through" }), bindings: {} },
    ...builds.map((b) => ({ ...b, bindings: gate })),
  ];
  const samples = new Samples();
  for (let r = 0; r < reps; r++) {
    for (let k = 0; k < targets.length; k++) {
      const t = targets[(k + r) % targets.length]!;
      if (values.only !== "cpu") {
        const m = await measureMemory(t, bindings, origin);
        console.error(`rep ${r + 1} ${t.name} memory`, JSON.stringify(m));
        for (const [level, kib] of Object.entries(m.rssKiB)) samples.add(t.name, `rssKiB with ${level} stalled`, kib);
        for (const [level, bytes] of Object.entries(m.bytesPerUpload)) samples.add(t.name, `bytes per stalled upload, ${level} open`, bytes);
      }
      if (values.only !== "memory") {
        const c = await measureCpu(t, bindings);
        console.error(`rep ${r + 1} ${t.name} cpu`, JSON.stringify(c));
        samples.add(t.name, "cpu ms per MiB", c.cpuMsPerMiB);
        samples.add(t.name, "wall ms per MiB", c.wallMsPerMiB);
      }
    }
  }
  console.log(
    JSON.stringify({ reps, stalledFirstBytes: firstBytes, uploads: `${uploads} × ${mb} MiB`, loadavg: loadavg().map((x) => round(x)), results: samples.summary() }, null, 1),
  );
} finally {
  await origin.close();
  await stack.close();
}
