import type { Redis } from "@upstash/redis/cloudflare";
import type { Registry } from "../admin/registry.ts";
import { unknownFields } from "../admin/unknown-fields.ts";
import type { GateConfig } from "../config/rate-limits.ts";
import { problem } from "../http/problem.ts";
import { describeConfiguration } from "./configuration.ts";
import { MAX_FIGURE_MINUTES, readFigures } from "./figures.ts";

const json = (body: unknown) => new Response(JSON.stringify(body), { headers: { "Content-Type": "application/json", "Cache-Control": "no-store" } });

/**
 * The admin routes the console reads (each a POST behind the admin token, like every admin
 * route): `figures` — the live figures of the last `minutes` (default 60, at most a day) — and
 * `configuration` — the effective configuration, without secrets.
 *
 * @example
 * POST /__slidegate/figures  Authorization: Bearer $ADMIN_TOKEN  {"minutes":60}
 */
export function consoleRoutes(options: { config: GateConfig; redis: Redis; registry: Registry; now: () => number }) {
  const { config } = options;
  return {
    figures: async (body: Record<string, unknown>): Promise<Response> => {
      const unknown = unknownFields(body, ["minutes"]);
      if (unknown) return problem(400, "bad-request", "Bad Request", unknown);
      const { minutes = 60 } = body;
      if (typeof minutes !== "number" || !Number.isInteger(minutes) || minutes < 1 || minutes > MAX_FIGURE_MINUTES) {
        return problem(400, "bad-request", "Bad Request", `"minutes" must be a whole number from 1 to ${MAX_FIGURE_MINUTES}`);
      }
      return json(await readFigures({ redis: options.redis, registry: options.registry, config, now: options.now() }, minutes));
    },
    configuration: async (body: Record<string, unknown>): Promise<Response> => {
      // it takes nothing: a field sent (a section asked for) would be ignored, the whole answered
      const unknown = unknownFields(body, []);
      if (unknown) return problem(400, "bad-request", "Bad Request", unknown);
      return json(describeConfiguration(config));
    },
  };
}
