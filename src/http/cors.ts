import type { CorsConfig } from "../config/rate-limits.ts";
import type { HeaderFields } from "./rate-limit-headers.ts";

/**
 * CORS, so that browser code on another site can read what the gate says. Only CORS-safelisted
 * response headers are readable without being exposed, and an answer without
 * Access-Control-Allow-Origin is a network error to `fetch`.
 *
 * - The origin's answer: its CORS is its own. When it opened the answer to a site
 *   (Access-Control-Allow-Origin), the rate-limit headers the gate added are exposed too.
 * - The gate's own answers (429, 401, 403, 503, …): opened to the sites `cors` allows.
 */

/** What the gate's own answers expose: Retry-After and the rate-limit headers (a 429 carries them all). */
const EXPOSED = "Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset";

/**
 * Adds the names of `fields` (what the gate wrote on the origin's answer) to its
 * Access-Control-Expose-Headers, after what the origin listed and but the names it lists in
 * any case — `*` too, a wildcard only for requests without credentials — when the origin
 * opened the answer to a site; an answer the origin opened to none is left alone. The gate's
 * `X-Slidegate-*` reports (fail-open, shadow rules) are for the operator, not for browser code.
 *
 * @example
 * exposeGateFields(response.headers, [["RateLimit", '"minute";r=9;t=60']]); // "X-Request-Id" → "X-Request-Id, RateLimit"
 */
export function exposeGateFields(headers: Headers, fields: Readonly<HeaderFields>): void {
  if (fields.length === 0 || !headers.has("access-control-allow-origin")) return;
  const listed = headers.get("access-control-expose-headers")?.trim();
  const have = new Set(
    listed
      ?.toLowerCase()
      .split(",")
      .map((name) => name.trim()),
  );
  const names = fields.map(([name]) => name).filter((name) => !name.startsWith("X-Slidegate-") && !have.has(name.toLowerCase()));
  if (names.length) headers.set("access-control-expose-headers", listed ? `${listed}, ${names.join(", ")}` : names.join(", "));
}

/**
 * The CORS headers of the gate's own answers, settled once from the configuration: for a
 * request whose Origin is one of `origins` exactly (browsers send an origin serialised, host in
 * lower case), that origin echoed with `Vary: Origin`; with `"*"`, `*` for any Origin (`null`
 * too); credentials when configured. Nothing for a request without an Origin or with another,
 * and undefined without a configuration, so the answers of a gate without it cost nothing.
 * Headers are added to the answer's own copy: the 429's precomputed ones stay as they are.
 *
 * @example
 * const open = corsForAnswers(config.cors);
 * return open ? open(request, problem) : problem;
 */
export function corsForAnswers(cors: CorsConfig | undefined): ((request: Request, response: Response) => Response) | undefined {
  if (!cors) return undefined;
  const { origins, credentials } = cors;
  return (request, response) => {
    const origin = request.headers.get("origin");
    if (origin === null || (origins !== "*" && !origins.has(origin))) return response;
    const h = response.headers;
    if (origins === "*") h.set("Access-Control-Allow-Origin", "*");
    else {
      // only a value of the configuration is ever echoed
      h.set("Access-Control-Allow-Origin", origin);
      h.append("Vary", "Origin");
    }
    if (credentials) h.set("Access-Control-Allow-Credentials", "true");
    h.set("Access-Control-Expose-Headers", EXPOSED);
    return response;
  };
}
