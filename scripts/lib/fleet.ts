import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { Miniflare } from "miniflare";

const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync("wrangler.toml", "utf8"))![1]!;

/** Receives each line the Worker logs (console.log/warn/error); default: dropped. */
export type LogSink = (line: string) => void;

function lines(sink: LogSink) {
  return (stream: Readable) => {
    let rest = "";
    stream.on("data", (chunk: Buffer) => {
      const parts = (rest + chunk.toString()).split("\n");
      rest = parts.pop()!;
      for (const line of parts) if (line) sink(line);
    });
  };
}

/** One isolate of a built Worker (a `buildWorker()` folder) in a Miniflare instance of its own. */
export async function startIsolate(workerDir: string, bindings: Record<string, string>, log: LogSink = () => {}): Promise<Miniflare> {
  const mf = new Miniflare({
    handleRuntimeStdio: (stdout: Readable, stderr: Readable) => [stdout, stderr].forEach(lines(log)),
    modules: true,
    // wrangler names the bundle after the entry file: the one .js in the folder
    scriptPath: join(workerDir, readdirSync(workerDir).find((f) => f.endsWith(".js"))!),
    modulesRoot: workerDir,
    compatibilityDate,
    bindings,
  });
  await mf.ready;
  return mf;
}

export interface Fleet {
  isolates: Miniflare[];
  /** status codes of `m` requests from one client, fired at once and spread round-robin over the isolates */
  burst(m: number, headers: Record<string, string>, path?: string): Promise<number[]>;
  dispose(): Promise<void>;
}

/** K isolates of the gate sharing one store, as a deployment's isolates do across the edge. */
export async function startFleet(k: number, workerDir: string, bindings: Record<string, string>, log?: LogSink): Promise<Fleet> {
  const isolates = await Promise.all(Array.from({ length: k }, () => startIsolate(workerDir, bindings, log)));
  return {
    isolates,
    burst: (m, headers, path = "/") =>
      Promise.all(
        Array.from({ length: m }, async (_, i) => {
          const res = await isolates[i % k]!.dispatchFetch(`http://gate.example${path}`, { headers });
          await res.arrayBuffer();
          return res.status;
        }),
      ),
    dispose: async () => void (await Promise.all(isolates.map((mf) => mf.dispose()))),
  };
}

/** A RATE_LIMITS value with a key prefix of its own, so runs never share counts. */
export function freshRateLimits(config: Record<string, unknown>): string {
  return JSON.stringify({ prefix: `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`, ...config });
}
