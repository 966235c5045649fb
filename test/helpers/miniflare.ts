import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Miniflare } from "miniflare";
import { services } from "./shim.ts";

const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync("wrangler.toml", "utf8"))![1]!;

/**
 * One isolate of the built gate Worker (what `npm run build` deploys), in its own
 * Miniflare instance, pointed at the test shim and origin unless `bindings` say otherwise.
 */
export async function startGateIsolate(bindings: Record<string, string>, scriptDir = services().workerDir): Promise<Miniflare> {
  const s = services();
  const mf = new Miniflare({
    modules: true,
    scriptPath: join(scriptDir, "index.js"),
    modulesRoot: scriptDir,
    modulesRules: [{ type: "Text", include: ["**/*.lua"] }],
    compatibilityDate,
    bindings: {
      ORIGIN_URL: s.originUrl,
      UPSTASH_REDIS_REST_URL: s.shimUrl,
      UPSTASH_REDIS_REST_TOKEN: s.shimToken,
      ...bindings,
    },
  });
  await mf.ready;
  return mf;
}

/** A RATE_LIMITS value with a key prefix of its own, so runs never share counts. */
export function rateLimits(config: Record<string, unknown>): string {
  return JSON.stringify({ prefix: `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`, ...config });
}
