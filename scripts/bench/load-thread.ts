/**
 * The load client's thread: runs one job at a time for load-client.ts, on an event loop of
 * its own, so the timing of each request is not held up by the demo origin (which answers
 * in the bench's main thread).
 */
import { Agent, request } from "node:http";
import { performance } from "node:perf_hooks";
import { parentPort } from "node:worker_threads";
import type { LoadJob, Slice } from "./load-client.ts";

/** One request on `agent`, timed from before it is written until its last byte is read. */
function timed(agent: Agent, url: URL, headers: Record<string, string>): Promise<{ ms: number; status: string }> {
  return new Promise((resolve) => {
    const start = performance.now();
    const req = request(url, { agent, headers }, (res) => {
      res.on("data", () => {});
      res.on("end", () => resolve({ ms: performance.now() - start, status: String(res.statusCode) }));
      res.on("error", () => resolve({ ms: performance.now() - start, status: "error" }));
    });
    req.on("error", () => resolve({ ms: performance.now() - start, status: "error" }));
    req.end();
  });
}

/** `clients` loops, each with one request in flight, until `count` requests have been sent between them. */
async function drive(agent: Agent, url: URL, headers: Record<string, string>, clients: number, count: number, samples?: Float64Array, statuses?: Map<string, number>) {
  let issued = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (issued < count) {
        const i = issued++;
        const { ms, status } = await timed(agent, url, headers);
        if (samples) samples[i] = ms;
        statuses?.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
}

async function run(job: LoadJob): Promise<{ id: number } & Slice> {
  const url = new URL(job.url);
  // One socket per client, kept open across requests, as a busy caller's HTTP client does.
  const agent = new Agent({ keepAlive: true, maxSockets: job.clients, maxFreeSockets: job.clients });
  try {
    // Untimed: opens every connection and warms both ends, so no timed request pays a handshake.
    await drive(agent, url, job.headers, job.clients, job.clients * job.warmupPerClient);
    const samples = new Float64Array(job.requests);
    const statuses = new Map<string, number>();
    const started = performance.now();
    await drive(agent, url, job.headers, job.clients, job.requests, samples, statuses);
    const wallMs = performance.now() - started;
    return { id: job.id, samples, wallMs, statuses: Object.fromEntries(statuses) };
  } finally {
    agent.destroy();
  }
}

parentPort!.on("message", (job: LoadJob) => {
  run(job).then(
    (reply) => parentPort!.postMessage(reply, [reply.samples.buffer]),
    (error: unknown) => parentPort!.postMessage({ id: job.id, error: String(error) }),
  );
});
