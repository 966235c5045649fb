import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

/** Node tests whose outcome a loaded machine could change: they run alone (see the "contention" project). */
const CONTENTION = [
  "test/node/concurrency.test.ts",
  "test/node/faults.test.ts",
  "test/node/cluster.test.ts",
  "test/node/fleet.test.ts",
  "test/node/shim-load.test.ts",
  "test/node/contention-angles.test.ts",
];

export default defineConfig({
  root: fileURLToPath(new URL("..", import.meta.url)),
  test: {
    // One set of services for both projects, started in Node (the Worker project's own
    // module runner bundles for workerd and cannot load Node-only packages).
    globalSetup: ["test/setup/services.ts"],
    reporters: ["default", "./test/summary-reporter.ts"],
    projects: [
      {
        // The shim, scripts and multi-isolate runs: Node, with real processes.
        test: {
          name: "node",
          include: ["test/node/**/*.test.ts", "scripts/**/*.test.ts"],
          exclude: CONTENTION,
          environment: "node",
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        // Bursts of hundreds of concurrent requests and budgets of a few hundred ms: run after
        // everything else, one file at a time, so no other test's load decides their outcome.
        test: {
          name: "contention",
          include: CONTENTION,
          environment: "node",
          fileParallelism: false,
          sequence: { groupOrder: 1 },
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        // The Worker itself, inside workerd.
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              // for the test runner's own modules; the gate itself needs no Node APIs
              compatibilityFlags: ["nodejs_compat"],
              bindings: { TEST_SERVICES: JSON.stringify(inject("services")) },
              // the runtime's local dataset (it keeps nothing; tests read points back from their own)
              analyticsEngineDatasets: { SLIDEGATE_METRICS: { dataset: "slidegate-test" } },
            },
          })),
        ],
        test: {
          name: "worker",
          include: ["test/worker/**/*.test.ts", "src/**/*.test.ts"],

          testTimeout: 30_000,
        },
      },
    ],
  },
});
