import { Redis } from "@upstash/redis";
import { inject } from "vitest";

/** The project's shim, Redis and origin (started by test/setup/services.ts). */
export const services = () => inject("services");

/** The official client, pointed at the shim, as an application would build it. */
export function upstash(options: { responseEncoding?: false; url?: string; token?: string } = {}) {
  const s = services();
  return new Redis({ url: options.url ?? s.shimUrl, token: options.token ?? s.shimToken, responseEncoding: options.responseEncoding, enableTelemetry: false });
}

/** A raw HTTP call to the shim, for what the client never sends. */
export async function raw(path: string, body: string | undefined, headers: Record<string, string> = {}, method = "POST") {
  const s = services();
  const res = await fetch(s.shimUrl + path, {
    method,
    body,
    headers: { authorization: `Bearer ${s.shimToken}`, "content-type": "application/json", ...headers },
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: JSON.parse(text) as Record<string, unknown> | unknown[] };
}

/** A key unique to this test run, so parallel files never share data. */
export const key = (name: string) => `test:${name}:${crypto.randomUUID()}`;
