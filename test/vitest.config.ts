import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

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
          environment: "node",
          
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
