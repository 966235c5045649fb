#!/usr/bin/env node
/**
 * `npm run bench [-- --quick] [-- --out DIR]`: every measurement in one go, against processes
 * started fresh — a redis-server, the shim, the demo origin and Workers in workerd. Writes
 * results.json (with machine and versions) and chart.svg to docs/benchmarks/ (or DIR).
 * `--quick` runs each measurement for a moment, as a smoke check: its numbers mean little.
 * `--render` redraws chart.svg from an existing results.json.
 * Timings are reported, never asserted.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, type as osType, release, totalmem } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startLocalStack } from "../lib/stack.ts";
import { renderChart } from "./chart.ts";
import { GATEWAY_FULL, GATEWAY_QUICK, measureGateway } from "./gateway.ts";
import { measureMemory, measureRegistryMemory, measureScriptCost } from "./redis-ops.ts";
import { measureShimOverhead } from "./shim-latency.ts";

const { values } = parseArgs({ options: { quick: { type: "boolean", default: false }, render: { type: "boolean", default: false }, out: { type: "string" } } });
const quick = values.quick!;
const out = values.out ?? (quick ? join("dist", "bench-quick") : join("docs", "benchmarks"));
const started = Date.now();
const step = (name: string) => (detail: string) => console.log(`  [${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s] ${name}: ${detail}`);

const version = (pkg: string) => (JSON.parse(readFileSync(join("node_modules", pkg, "package.json"), "utf8")) as { version: string }).version;
const machine = {
  cpu: cpus()[0]?.model,
  cores: cpus().length,
  memoryGiB: Math.round(totalmem() / 2 ** 30),
  os: `${osType()} ${release()}`,
  node: process.version,
  redis: execFileSync("redis-server", ["--version"], { encoding: "utf8" }).trim(),
  packages: Object.fromEntries(["wrangler", "miniflare", "@upstash/redis", "@upstash/ratelimit", "ioredis", "autocannon"].map((p) => [p, version(p)])),
};

type Results = {
  scriptCost: Awaited<ReturnType<typeof measureScriptCost>>;
  memory: Awaited<ReturnType<typeof measureMemory>>;
  gateway: Awaited<ReturnType<typeof measureGateway>>;
};

const seriesOf = (label: string) =>
  label.startsWith("slidegate") ? "slidegate" : label.startsWith("@upstash") ? "@upstash/ratelimit" : label.startsWith("floor") ? "floor" : "seed 001";

function chart({ scriptCost, memory, gateway }: Results): Promise<string> {
  return renderChart([
    ...scriptCost.map((r) => ({ panel: "usec", series: seriesOf(r.label), label: r.label, value: r.usecPerCall })),
    ...memory.flatMap((m) => [
      { panel: "memory", series: "slidegate", label: `${m.entries} entries`, value: m.slidegateBytesPerEntry },
      { panel: "memory", series: "seeds' <ms>-<uuid>", label: `${m.entries} entries`, value: m.seedBytesPerEntry },
    ]),
    // d: medians of rounds, with the lowest and highest round
    ...Object.entries(gateway.addedOverPassThrough).flatMap(([target, a]) => [
      { panel: "admitted", series: target, label: "added p50", value: a.p50.median, lo: a.p50.min, hi: a.p50.max },
      { panel: "admitted", series: target, label: "added p99", value: a.p99.median, lo: a.p99.min, hi: a.p99.max },
    ]),
    ...Object.entries(gateway.denied).flatMap(([target, d]) => [
      { panel: "denied-latency", series: target, label: "p50", value: d.p50.median, lo: d.p50.min, hi: d.p50.max },
      { panel: "denied-latency", series: target, label: "p99", value: d.p99.median, lo: d.p99.min, hi: d.p99.max },
      { panel: "denied-rps", series: target, label: "req/s", value: d.rps.median, lo: d.rps.min, hi: d.rps.max },
    ]),
  ]);
}

if (values.render) {
  // Redraw the chart from results already measured (no measurement runs).
  const results = JSON.parse(readFileSync(join(out, "results.json"), "utf8")) as Results;
  writeFileSync(join(out, "chart.svg"), await chart(results));
  console.log(`redrew ${join(out, "chart.svg")} from ${join(out, "results.json")}`);
  process.exit(0);
}

console.log(`slidegate benchmark${quick ? " (quick: a smoke check, not a measurement)" : ""}`);
// The shim in a process of its own, as it runs in front of a real Redis, not sharing a CPU with the load generators.
const stack = await startLocalStack({ shimProcess: true });
try {
  const registered = quick ? 2000 : 100_000;
  const scriptCost = await measureScriptCost(stack.redis.url, quick ? { rounds: 1, ms: 200, registered } : { rounds: 11, ms: 700, registered }, step("a. script cost"));
  const registry = await measureRegistryMemory(stack.redis.url, registered);
  step("b. memory")("MEMORY USAGE at 100, 128, 1,000, 10,000 entries");
  const memory = await measureMemory(stack.redis.url, [100, 128, 1000, 10_000]);
  step("c. shim overhead")("EVALSHA through @upstash/redis + shim vs ioredis direct");
  const shim = await measureShimOverhead(stack.redis.url, stack.shim.url, stack.token, quick ? 200 : 3000, quick ? 200 : 3000);
  const gateway = await measureGateway(stack, quick ? GATEWAY_QUICK : GATEWAY_FULL, step("d–f. gateway"));

  const results = { date: new Date().toISOString(), quick, machine, scriptCost, memory, registry, shim, gateway };
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "results.json"), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(out, "chart.svg"), await chart(results));
  console.log(
    JSON.stringify(
      {
        scriptCost,
        memory,
        registry,
        shim: { latencyP50Ratio: shim.latencyP50Ratio, latencyP99Ratio: shim.latencyP99Ratio },
        gateway: { ...gateway, admitted: undefined, denied: undefined },
      },
      null,
      1,
    ),
  );
  console.log(`\nwrote ${join(out, "results.json")} and ${join(out, "chart.svg")} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
} finally {
  await stack.close();
}
