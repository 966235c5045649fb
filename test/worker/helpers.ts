import { env } from "cloudflare:workers";
import { parseRateLimits } from "../../src/config/rate-limits.ts";
import { createGate, type Gate, type GateOptions } from "../../src/gateway/gateway.ts";
import type { Services } from "../setup/services.ts";

export const services: Services = JSON.parse(env.TEST_SERVICES);

export interface Logged {
  level: "warn" | "error";
  line: Record<string, unknown>;
}

/**
 * A gate as the Worker builds it, in front of the test origin and the shim. Each gate gets a
 * key prefix of its own, so no two tests share a count.
 */
export function makeGate(rateLimits: Record<string, unknown>, options: Partial<GateOptions> = {}): Gate & { logs: Logged[] } {
  const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
  const parsed = parseRateLimits({ prefix, ...rateLimits });
  if (!parsed.ok) throw new Error(parsed.errors.join("; "));
  const logs: Logged[] = [];
  const gate = createGate({
    config: parsed.config,
    origin: new URL(services.originUrl),
    redisUrl: services.shimUrl,
    redisToken: services.shimToken,
    log: (level, line) => logs.push({ level, line }),
    ...options,
  });
  return Object.assign(gate, { logs });
}

export interface Call {
  ip?: string;
  key?: string;
  method?: string;
  headers?: Record<string, string>;
  body?: BodyInit;
}

export function request(path = "/", call: Call = {}): Request {
  const headers = new Headers(call.headers);
  if (!headers.has("cf-connecting-ip")) headers.set("cf-connecting-ip", call.ip ?? "203.0.113.7");
  if (call.key !== undefined) headers.set("x-api-key", call.key);
  return new Request(`https://gate.example${path}`, { method: call.method ?? "GET", headers, body: call.body });
}

/** Status codes of `n` requests sent one after another. */
export async function statuses(gate: Gate, n: number, path = "/", call: Call = {}): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await gate(request(path, call));
    await res.body?.cancel();
    out.push(res.status);
  }
  return out;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The gate's clock seam, moved by hand: with `clock: "edge"` the script decides by it, and the
 * isolate's caches read it too, so time in a test passes exactly and at once.
 *
 * @example
 * const clock = testClock();
 * const gate = makeGate({ clock: "edge", rules }, { now: clock.now });
 * clock.advance(1100);
 */
export function testClock(start = Date.UTC(2026, 10, 29, 12)) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

export async function sha256Hex(data: ArrayBuffer | Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", data);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
