import { Worker } from "node:worker_threads";
import { percentile, round } from "./stats.ts";

/** What the load thread is asked to do: `requests` GETs of `url` from `clients` keep-alive connections. */
export interface LoadJob {
  id: number;
  url: string;
  headers: Record<string, string>;
  clients: number;
  requests: number;
  /** untimed requests per client first, to open the connections */
  warmupPerClient: number;
}

/** What one job measured: each timed request's latency in ms, the job's wall time, and the statuses. */
export interface Slice {
  samples: Float64Array<ArrayBuffer>;
  wallMs: number;
  statuses: Record<string, number>;
}

export type LoadReply = ({ id: number } & Slice) | { id: number; error: string };

/** Timed runs of one target, pooled: latencies over every request, throughput over the runs' time. */
export interface LoadRun {
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  n: number;
  statuses: Record<string, number>;
}

/** Pools slices of one target (say, the slices of one round) into one figure. */
export function pool(slices: readonly Slice[]): LoadRun {
  const sorted = slices.flatMap((s) => Array.from(s.samples)).sort((a, b) => a - b);
  const wallMs = slices.reduce((sum, s) => sum + s.wallMs, 0);
  const statuses: Record<string, number> = {};
  for (const s of slices) for (const [code, n] of Object.entries(s.statuses)) statuses[code] = (statuses[code] ?? 0) + n;
  return {
    rps: round(sorted.length / (wallMs / 1000), 0),
    p50: round(percentile(sorted, 50)),
    p90: round(percentile(sorted, 90)),
    p99: round(percentile(sorted, 99)),
    max: round(sorted.at(-1) ?? NaN),
    n: sorted.length,
    statuses,
  };
}

export interface LoadClient {
  run(url: string, options: { headers?: Record<string, string>; clients: number; requests: number; warmupPerClient?: number }): Promise<Slice>;
  close(): Promise<void>;
}

/**
 * An HTTP load client of the bench's own: `clients` concurrent callers over keep-alive
 * connections (node:http), each with one request in flight, every request timed with
 * `performance.now()` from before it is written to its last byte. It runs in a worker thread,
 * apart from the origin that answers in this one. One run at a time.
 *
 * @example
 * const client = startLoadClient();
 * const r = pool([await client.run("http://127.0.0.1:8787/v1/echo", { clients: 16, requests: 1500 })]);
 * r.p99; // ms, sub-millisecond resolution
 * await client.close();
 */
export function startLoadClient(): LoadClient {
  const thread = new Worker(new URL("./load-thread.ts", import.meta.url));
  const waiting = new Map<number, (reply: LoadReply) => void>();
  let next = 0;
  thread.on("message", (reply: LoadReply) => {
    waiting.get(reply.id)?.(reply);
    waiting.delete(reply.id);
  });
  thread.on("error", (error) => {
    for (const done of waiting.values()) done({ id: -1, error: String(error) });
    waiting.clear();
  });
  return {
    async run(url, { headers = {}, clients, requests, warmupPerClient = 1 }) {
      const job: LoadJob = { id: next++, url, headers, clients, requests, warmupPerClient };
      const reply = await new Promise<LoadReply>((resolve) => {
        waiting.set(job.id, resolve);
        thread.postMessage(job);
      });
      if ("error" in reply) throw new Error(`load client: ${reply.error}`);
      return reply;
    },
    close: async () => void (await thread.terminate()),
  };
}
