import type { Reporter, TestModule } from "vitest/node";

/**
 * Ends every run with one plain line, "N passed, N failed" (", N skipped" when any were),
 * that any CI can read whatever test runner it knows.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>) {
    const counts = { passed: 0, failed: 0, skipped: 0 };
    for (const module of modules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === "passed") counts.passed++;
        else if (state === "failed") counts.failed++;
        else counts.skipped++;
      }
      if (module.state() === "failed" && ![...module.children.allTests()].length) counts.failed++; // a file that failed to load
    }
    counts.failed += unhandledErrors.length;
    const skipped = counts.skipped ? `, ${counts.skipped} skipped` : "";
    process.stdout.write(`\n${counts.passed} passed, ${counts.failed} failed${skipped}\n`);
  }
}
