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

export type LoadReply = { id: number; samples: Float64Array<ArrayBuffer>; wallMs: number; statuses: Record<string, number> } | { id: number; error: string };

/** One timed run against one target. Latencies in ms, each request timed on its own. */
export interface LoadRun {
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  n: number;
  statuses: Record<string, number>;
}

export interface LoadClient {
  run(url: string, options: { headers?: Record<string, string>; clients: number; requests: number; warmupPerClient?: number }): Promise<LoadRun>;
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
 * const r = await client.run("http://127.0.0.1:8787/v1/echo", { clients: 16, requests: 1500 });
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
    async run(url, { headers = {}, clients, requests, warmupPerClient = 2 }) {
      const job: LoadJob = { id: next++, url, headers, clients, requests, warmupPerClient };
      const reply = await new Promise<LoadReply>((resolve) => {
        waiting.set(job.id, resolve);
        thread.postMessage(job);
      });
      if ("error" in reply) throw new Error(`load client: ${reply.error}`);
      const sorted = Array.from(reply.samples).sort((a, b) => a - b);
      return {
        rps: round(requests / (reply.wallMs / 1000), 0),
        p50: round(percentile(sorted, 50)),
        p90: round(percentile(sorted, 90)),
        p99: round(percentile(sorted, 99)),
        max: round(sorted[sorted.length - 1] ?? NaN),
        n: sorted.length,
        statuses: reply.statuses,
      };
    },
    close: async () => void (await thread.terminate()),
  };
}
