import { Redis as Upstash } from "@upstash/redis";
import autocannon from "autocannon";
import Redis from "ioredis";
import { SLIDING_WINDOW_SCRIPT } from "../../src/script/sliding-window.ts";
import { rewriteShebang } from "../shim/lua-flags.ts";
import { ratio, round, summary } from "./stats.ts";

const script = SLIDING_WINDOW_SCRIPT;

async function sequential(call: (i: number) => Promise<unknown>, n: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await call(i);
    samples.push(performance.now() - t);
  }
  return samples;
}

async function throughput(call: (i: number) => Promise<unknown>, concurrency: number, ms: number): Promise<number> {
  let done = 0;
  const deadline = performance.now() + ms;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) await call(done++);
    }),
  );
  return Math.round((done / (performance.now() - started)) * 1000);
}

/**
 * One decision (EVALSHA of the sliding-window script) by @upstash/redis through the shim,
 * against the same call by a direct RESP client (ioredis) to the same Redis.
 */
export async function measureShimOverhead(redisUrl: string, shimUrl: string, token: string, n: number, ms: number) {
  const direct = new Redis(redisUrl, { protocol: 2 });
  const sha = (await direct.script("LOAD", rewriteShebang(script) ?? script)) as string;
  const rest = new Upstash({ url: shimUrl, token, enableTelemetry: false, enableAutoPipelining: false });
  const restSha = await rest.scriptLoad(script); // the client's SHA1; the shim maps it
  // KEYS and ARGV as src/script/limiter.ts sends them for an address: block, registry entry, log;
  // now ("" = Redis TIME), tier, "-" (no registry read), then name, limit, window, cost, shadow
  const args = ["", "t", "-", "d", 1e9, 3_600_000, 1, 0];
  const viaDirect = () => direct.evalsha(sha, 3, "bench:{lat}:block", "bench:{lat}:key", "bench:{lat}:t:d", ...args);
  const viaShim = () => rest.evalsha(restSha, ["bench:{lat}:block", "bench:{lat}:key", "bench:{lat}:t:s"], args);

  await sequential(viaDirect, 200); // warm both paths
  await sequential(viaShim, 200);
  const d = summary(await sequential(viaDirect, n));
  const s = summary(await sequential(viaShim, n));
  const dThroughput = await throughput(viaDirect, 16, ms);
  const sThroughput = await throughput(viaShim, 16, ms);
  // The shim's own capacity, with a load generator that is not a Node fetch client.
  const served = await autocannon({
    url: shimUrl,
    connections: 16,
    duration: Math.max(1, Math.round(ms / 1000)),
    requests: [
      {
        method: "POST",
        headers: { authorization: `Bearer ${token}` },
        body: JSON.stringify(["EVALSHA", restSha, 3, "bench:{lat}:block", "bench:{lat}:key", "bench:{lat}:t:a", ...args]),
      },
    ],
  });
  direct.disconnect();
  return {
    direct: { ...d, opsPerSec: dThroughput },
    shim: { ...s, opsPerSec: sThroughput, serverRpsUnderAutocannon: Math.round(served.requests.average), serverP50: served.latency.p50, serverP99: served.latency.p99 },
    latencyP50Ratio: ratio(s.p50, d.p50),
    latencyP99Ratio: ratio(s.p99, d.p99),
    throughputRatio: round(sThroughput / dThroughput, 3),
  };
}
