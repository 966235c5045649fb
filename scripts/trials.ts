#!/usr/bin/env node
/**
 * `npm run trials [-- --trials 100 --isolates 4 --requests 500 --limit 50]`: the contention
 * check of the test suite, as many times as asked, on a fresh local stack. Prints a tally and
 * exits 1 if any trial admitted other than exactly the limit.
 */
import { parseArgs } from "node:util";
import { buildWorker } from "./lib/build-worker.ts";
import { freshRateLimits, startFleet } from "./lib/fleet.ts";
import { startLocalStack } from "./lib/stack.ts";
import { runTrials } from "./lib/trials.ts";

const { values } = parseArgs({
  options: {
    trials: { type: "string", default: "100" },
    isolates: { type: "string", default: "4" },
    requests: { type: "string", default: "500" },
    limit: { type: "string", default: "50" },
  },
});
const [trials, k, m, limit] = [values.trials, values.isolates, values.requests, values.limit].map(Number) as [number, number, number, number];

console.log(`building the Worker and starting redis-server, shim and origin …`);
const workerDir = buildWorker();
const stack = await startLocalStack();
const fleet = await startFleet(k, workerDir, { ...stack.bindings, RATE_LIMITS: freshRateLimits({ rules: [{ name: "default", limit, window: "1h" }] }) });
console.log(`${trials} trials: ${k} isolates, ${m} concurrent requests per trial, limit ${limit}`);
const started = Date.now();
try {
  const tally = await runTrials(fleet, {
    trials,
    m,
    limit,
    onTrial: (i, admitted) => process.stdout.write(admitted === limit ? "." : `[trial ${i}: ${admitted}]`),
  });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `\n\ntrials ${tally.trials}, requests ${tally.requests}, exactly ${limit} admitted in ${tally.exact}/${tally.trials} trials` +
      ` (min ${Math.min(...tally.admitted)}, max ${Math.max(...tally.admitted)}), other statuses ${tally.unexpected.length}, ${seconds} s`,
  );
  process.exitCode = tally.exact === tally.trials && tally.unexpected.length === 0 ? 0 : 1;
} finally {
  await fleet.dispose();
  await stack.close();
}
