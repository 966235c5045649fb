/**
 * Who is calling. The API key (when configured) or the client IP from CF-Connecting-IP,
 * which Cloudflare sets itself: X-Forwarded-For and X-Real-IP are never read, because a
 * client can write them.
 *
 * Only digests leave this module. The Redis tag is a truncated SHA-256, so neither raw
 * keys nor IPs reach Redis and key length stays bounded whatever the client sends.
 */

export interface Identity {
  /** "k" for an API key, "i" for an IP: the two never share a bucket */
  kind: "k" | "i";
  /** base64url of the first 16 bytes of SHA-256: the {hash tag} of every Redis key */
  tag: string;
  /** full SHA-256 hex of an API key, to look its tier up; undefined for IPs */
  keyHash?: string;
}

const encoder = new TextEncoder();

export async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

export function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

function base64url(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Identity of an API key or IP address as given. */
export async function identify(kind: "k" | "i", value: string): Promise<Identity> {
  const digest = await sha256(value);
  return { kind, tag: kind + base64url(digest.subarray(0, 16)), keyHash: kind === "k" ? hex(digest) : undefined };
}

/** The client IP as Cloudflare reports it; requests without one share a single bucket. */
export function clientIp(request: Request): string {
  return request.headers.get("cf-connecting-ip") ?? "unknown";
}

/** The API key from `header`, or undefined when absent or blank. */
export function apiKey(request: Request, header: string): string | undefined {
  const value = request.headers.get(header)?.trim();
  return value ? value : undefined;
}
