import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/**
 * Bundles a Worker exactly as `npm run build` does (`wrangler deploy --dry-run`) into a
 * fresh folder, for Miniflare instances run from Node. Returns the folder.
 */
export function buildWorker(options: { config?: string; entry?: string; name?: string } = {}): string {
  const outdir = mkdtempSync(join(tmpdir(), "slidegate-build-"));
  // The package exports only package.json and its API; the CLI sits beside it.
  const wrangler = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
  const args = [wrangler, "deploy", "--dry-run", "--outdir", outdir];
  if (options.config) args.push("--config", options.config);
  if (options.name) args.push("--name", options.name);
  if (options.entry) args.push(options.entry);
  const run = spawnSync(process.execPath, args, { encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false" } });
  if (run.status !== 0) throw new Error(`wrangler build failed (exit ${run.status}):\n${run.stdout}\n${run.stderr}`);
  return outdir;
}
