import type { Miniflare } from "miniflare";
import { type Fleet, type LogSink, startFleet, startIsolate } from "../../scripts/lib/fleet.ts";
import { services } from "./shim.ts";

export { freshRateLimits as rateLimits } from "../../scripts/lib/fleet.ts";

/** The test stack's origin and shim, unless `bindings` say otherwise. */
const defaults = () => {
  const s = services();
  return { ORIGIN_URL: s.originUrl, UPSTASH_REDIS_REST_URL: s.shimUrl, UPSTASH_REDIS_REST_TOKEN: s.shimToken };
};

/** One isolate of the built gate Worker (what `npm run build` deploys). */
export function startGateIsolate(bindings: Record<string, string>, log?: LogSink): Promise<Miniflare> {
  return startIsolate(services().workerDir, { ...defaults(), ...bindings }, log);
}

/** K isolates of the built gate Worker sharing one store. */
export function startGateFleet(k: number, bindings: Record<string, string>, log?: LogSink): Promise<Fleet> {
  return startFleet(k, services().workerDir, { ...defaults(), ...bindings }, log);
}
