import { errors } from "@upstash/redis/cloudflare";
import { problem } from "../http/problem.ts";
import { LimiterError } from "../script/limiter.ts";

/**
 * Whether an admin call failed because of the store: the client's own errors (an error
 * answer, an unreadable one), workerd's network failures (a plain Error) and aborts (a
 * DOMException). Programming errors are TypeError, RangeError and the like: those are bugs.
 *
 * @example
 * try { await redis.del(key); } catch (e) { if (!isStoreFailure(e)) throw e; return storeFailed(); }
 */
export function isStoreFailure(error: unknown): boolean {
  return (
    error instanceof errors.UpstashError ||
    error instanceof LimiterError ||
    error instanceof DOMException ||
    (error instanceof Error && Object.getPrototypeOf(error) === Error.prototype)
  );
}

/** The admin API's answer when the store failed: what failed stays in the log, never in the answer. */
export const storeFailed = () => problem(503, "store-unavailable", "Service Unavailable", "The rate-limit store failed.", { "Retry-After": "1" });
