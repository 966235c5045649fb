import ipaddr from "ipaddr.js";
import { memo } from "../memo.ts";
import { type KeyHeader, readKey } from "./api-key.ts";

/**
 * Who is calling. The API key (when configured) or the client IP from CF-Connecting-IP,
 * which Cloudflare sets itself: X-Forwarded-For and X-Real-IP are never read, because a
 * client can write them. Every spelling of an address is one caller, and so is every
 * address of one IPv6 prefix.
 *
 * Only digests leave this module. The Redis tag is a truncated SHA-256, so neither raw
 * keys nor IPs reach Redis and key length stays bounded whatever the client sends.
 */

export interface Identity {
  /**
   * "k" for an API key, "i" for an IP, "u" for an identity of the application's own (a user
   * id given to the library or the Hono middleware): no two kinds ever share a bucket, so a
   * made-up API key that spells a user id spends nothing of that user's
   */
  kind: "k" | "i" | "u";
  /** base64url of the first 16 bytes of SHA-256: the {hash tag} of every Redis key */
  tag: string;
  /** full SHA-256 hex of an API key, to look its tier up; undefined for addresses and an application's identities */
  keyHash?: string;
}

const encoder = new TextEncoder();

export async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

function base64url(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** A code unit of a surrogate pair without its other half, which UTF-8 cannot write. */
const UNPAIRED_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The bytes an identity's digest is taken of: its UTF-8, which writes every unpaired surrogate
 * as U+FFFD, so that "ada\uD800", "ada\uDC00" and "ada\uFFFD" (an application's user ids,
 * read from JSON, whose escapes carry one) would be one caller. Such a text of the
 * application's own is written as its UTF-16 code units after a 0xFF byte instead, which no
 * UTF-8 holds: every text its own bytes, and every text UTF-8 can write the bytes, and so the
 * bucket, it always had. An API key, which comes in a header, never holds one; its hash stays
 * the SHA-256 of its UTF-8, as `npm run keys` takes it.
 */
function identityBytes(kind: Identity["kind"], value: string): Uint8Array {
  if (kind !== "u" || !UNPAIRED_SURROGATE.test(value)) return encoder.encode(value);
  const bytes = new Uint8Array(1 + 2 * value.length);
  bytes[0] = 0xff;
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    bytes[1 + 2 * i] = unit >> 8;
    bytes[2 + 2 * i] = unit & 0xff;
  }
  return bytes;
}

async function digestIdentity(kindAndValue: string): Promise<Identity> {
  const kind = kindAndValue[0] as Identity["kind"];
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", identityBytes(kind, kindAndValue.slice(1))));
  return Object.freeze({ kind, tag: kind + base64url(digest.subarray(0, 16)), keyHash: kind === "k" ? hex(digest) : undefined });
}

/**
 * The isolate's recent callers: a flood from one caller hashes its key or address once. Only
 * values of a key's usual length are kept, so the memo's memory stays small (4,096 × 256
 * characters at most) whatever clients send.
 */
const recentIdentities = memo(digestIdentity, 4096);
const MEMO_MAX_LENGTH = 256;

/** Identity of an API key, an IP address or an application's own identity, as given. */
export function identify(kind: Identity["kind"], value: string): Promise<Identity> {
  return value.length < MEMO_MAX_LENGTH ? recentIdentities(kind + value) : digestIdentity(kind + value);
}

/** The identity of an API key known only by its SHA-256, as 64 lowercase hex digits (the registry lists keys so). */
export function keyIdentity(keyHash: string): Identity {
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 16; i++) bytes[i] = parseInt(keyHash.slice(2 * i, 2 * i + 2), 16);
  return { kind: "k", tag: `k${base64url(bytes)}`, keyHash };
}

/** A parsed address in its one canonical form: IPv4-mapped IPv6 as IPv4, no IPv6 zone. */
export type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** IPv4 in plain dotted decimal: four parts of 0-255, none with a leading zero. */
const DOTTED_DECIMAL = /^(?:0|[1-9]\d{0,2})(?:\.(?:0|[1-9]\d{0,2})){3}$/;

/**
 * Why `text`, which reads as an address, may be read as another one, or undefined: IPv4 (alone
 * or at the end of an IPv6 address) other than in plain dotted decimal. `010.0.0.1` is 8.0.0.1
 * to inet_aton and to this gate's parser, 10.0.0.1 to others; `0xa.0.0.1` and `167772161` are
 * addresses to some readers only.
 *
 * @example
 * ambiguousAddress("192.000.002.077"); // "IPv4 written with leading zeros or in another base, …"
 * ambiguousAddress("192.0.2.77");      // undefined
 */
export function ambiguousAddress(text: string): string | undefined {
  const t = text.trim().replace(/%.*$/, "");
  const v4 = t.includes(":") ? t.slice(t.lastIndexOf(":") + 1) : t;
  if ((t.includes(":") && !v4.includes(".")) || DOTTED_DECIMAL.test(v4) || !ipaddr.isValid(t)) return undefined;
  return `IPv4 written with leading zeros or in another base, which readers disagree on: write it in plain dotted decimal (like 192.0.2.7)`;
}

/**
 * `text` as ipaddr.js must be given it to read the address it spells. ipaddr.js reads an
 * IPv4-compatible address written with a dotted tail (`::192.0.2.1`, RFC 4291 §2.5.5.1) as the
 * IPv4-mapped `::ffff:192.0.2.1`, so as the IPv4 client 192.0.2.1, while it reads the same
 * address written in hex (`::c000:201`) as IPv6: one address, two identities. Written `0::` it
 * reads it as the IPv6 address it is, as Go's `netip` and Python's `ipaddress`
 * do. Used for entries of the allow and deny lists too (`::198.51.100.0/120`).
 *
 * @example
 * ipaddrText("::192.0.2.1"); // "0::192.0.2.1"
 */
export function ipaddrText(text: string): string {
  return text.replace(/^(\s*)::(?=\d+\.\d+\.\d+\.\d+(?:[%/\s]|$))/, (_, space: string) => `${space}0::`);
}

/**
 * The address `text` spells, in canonical form, or undefined when it is not an address, or
 * not one every reader agrees on (see `ambiguousAddress`). Every spelling of one address gives
 * one result: compressed, expanded, upper case, IPv6 groups with leading zeros, IPv4-mapped
 * (`::ffff:192.0.2.1` is `192.0.2.1`).
 *
 * @example
 * addressText(parseAddress("2001:0DB8:0:0::1")!); // "2001:db8::1"
 */
export function parseAddress(text: string): Address | undefined {
  if (ambiguousAddress(text)) return undefined;
  let address: Address;
  try {
    address = ipaddr.process(ipaddrText(text.trim()));
  } catch {
    return undefined;
  }
  // a zone names an interface of the sender, not a different sender
  return address.kind() === "ipv6" ? new ipaddr.IPv6((address as ipaddr.IPv6).parts) : address;
}

/** The canonical text of an address: dotted quad, or RFC 5952 for IPv6. */
export function addressText(address: Address): string {
  return address.kind() === "ipv6" ? (address as ipaddr.IPv6).toRFC5952String() : address.toString();
}

/**
 * The network of `bits` bits an IPv6 address is in, as "2001:db8:1:2::/64".
 *
 * @example
 * ipv6Network(parseAddress("2001:db8:1:2:3:4:5:6") as ipaddr.IPv6, 48); // "2001:db8:1::/48"
 */
export function ipv6Network(address: ipaddr.IPv6, bits: number): string {
  const bytes = address.toByteArray();
  for (let bit = bits; bit < 128; bit++) bytes[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return `${(ipaddr.fromByteArray(bytes) as ipaddr.IPv6).toRFC5952String()}/${bits}`;
}

/**
 * The public IPv4 address an IPv6 address of a transition range is made from, or undefined:
 * 6to4 (`2002:V4ADDR::/48`, RFC 3056) is the whole site behind that IPv4 address, 2^16 networks
 * of a /64 that one caller could otherwise move through; Teredo (`2001:0::/32`, RFC 4380)
 * carries its client's address behind the NAT, inverted, in its last 32 bits; and the NAT64
 * prefix (`64:ff9b::/96`, RFC 6052) spells an IPv4 client translated to IPv6. By their network
 * alone, the last two would put every client of one Teredo server, or every translated IPv4
 * client, in one bucket.
 */
function embeddedIPv4(bytes: number[]): string | undefined {
  if (bytes[0] === 0x20 && bytes[1] === 0x02) return bytes.slice(2, 6).join(".");
  if (bytes[0] === 0x20 && bytes[1] === 0x01 && bytes[2] === 0 && bytes[3] === 0)
    return bytes
      .slice(12, 16)
      .map((b) => b ^ 0xff)
      .join(".");
  if (bytes[0] === 0 && bytes[1] === 0x64 && bytes[2] === 0xff && bytes[3] === 0x9b && bytes.slice(4, 12).every((b) => b === 0)) return bytes.slice(12, 16).join(".");
  return undefined;
}

/**
 * The transition range an IPv6 range of `bits` bits lies within whole, if any, with the caller
 * the gate counts there (see `embeddedIPv4`): a 6to4 site of a /48 (`site`, with the IPv4 address
 * it is made from), a Teredo client (its IPv4 address, whatever its server, flags and port: no
 * range narrower than 2001::/32 holds one whole), or a NAT64 address (one IPv4 client each).
 *
 * @example
 * transitionRange(parseAddress("2002:c000:207:1::") as ipaddr.IPv6, 64); // { kind: "6to4", site: "2002:c000:207::/48", ipv4: "192.0.2.7" }
 * transitionRange(parseAddress("2001:db8::") as ipaddr.IPv6, 32); // undefined
 */
export function transitionRange(net: ipaddr.IPv6, bits: number): { kind: "6to4"; site: string; ipv4: string } | { kind: "teredo"; ipv4?: string } | { kind: "nat64" } | undefined {
  const bytes = net.toByteArray();
  if (bits >= 16 && bytes[0] === 0x20 && bytes[1] === 0x02) return { kind: "6to4", site: ipv6Network(net, 48), ipv4: embeddedIPv4(bytes)! };
  if (bits >= 32 && bytes[0] === 0x20 && bytes[1] === 0x01 && bytes[2] === 0 && bytes[3] === 0) return { kind: "teredo", ipv4: bits === 128 ? embeddedIPv4(bytes) : undefined };
  if (bits >= 96 && embeddedIPv4(bytes) !== undefined) return { kind: "nat64" };
  return undefined;
}

/** Ranges of IPv4 addresses no transition range may embed (their RFCs forbid them): private, this host's, its link's, no host's. */
const LOCAL_IPV4: ReadonlySet<string> = new Set(["private", "loopback", "linkLocal", "unspecified", "broadcast", "multicast"]);

/**
 * `text`, an IPv4 address embedded in one of a transition range, unless a local one: no client
 * comes from 10.0.0.1 by way of 6to4, and such an address is counted by its network instead.
 */
const globalIPv4 = (text: string | undefined) => (text !== undefined && !LOCAL_IPV4.has(ipaddr.IPv4.parse(text).range()) ? text : undefined);

/**
 * The IPv4 address (not a local one) an IPv6 address of a transition range is made from (see
 * `embeddedIPv4`), or undefined: the caller the deny list reads it as, besides the address itself.
 *
 * @example
 * embeddedIPv4Address(parseAddress("2002:c633:6409::1") as ipaddr.IPv6)?.toString(); // "198.51.100.9"
 */
export function embeddedIPv4Address(address: ipaddr.IPv6): ipaddr.IPv4 | undefined {
  const text = globalIPv4(embeddedIPv4(address.toByteArray()));
  return text === undefined ? undefined : ipaddr.IPv4.parse(text);
}

/**
 * Who an address is counted as: an IPv4 address itself, an IPv6 address by its network of
 * `ipv6Prefix` bits ("2001:db8:1:2::/64"), since one customer holds a whole prefix — but an
 * address of a transition range (6to4, Teredo, NAT64) as the IPv4 address it is made from (see
 * `embeddedIPv4`), the caller it is in fact.
 */
export function addressBucket(address: Address, ipv6Prefix: number): string {
  if (address.kind() === "ipv4") return address.toString();
  return globalIPv4(embeddedIPv4(address.toByteArray())) ?? ipv6Network(address as ipaddr.IPv6, ipv6Prefix);
}

/** Callers whose address is missing or unreadable share one bucket: a new spelling buys nothing. */
export const UNKNOWN_CLIENT = "unknown";

/** The identity text of an IP address as given (for the admin API): its bucket, or the shared unknown one. */
export function ipIdentity(text: string, ipv6Prefix: number): string {
  const address = parseAddress(text);
  return address ? addressBucket(address, ipv6Prefix) : UNKNOWN_CLIENT;
}

export interface ClientAddress {
  /** the address, canonical; undefined when CF-Connecting-IP is missing or not an address */
  address?: Address;
  /** its canonical text, for the origin; undefined with `address` */
  text?: string;
  /** what the caller is counted as (see `addressBucket`) */
  bucket: string;
}

/** The client address as Cloudflare reports it in CF-Connecting-IP. */
export function clientAddress(request: Request, ipv6Prefix: number): ClientAddress {
  return givenAddress(request.headers.get("cf-connecting-ip"), ipv6Prefix);
}

/**
 * A client address as its text was read (from CF-Connecting-IP, or by an application from its
 * socket or its own proxy's header): null, or text that is no address, counts in the one
 * bucket of unknown callers.
 *
 * @example
 * givenAddress("2001:db8::7", 64).bucket; // "2001:db8::/64"
 * givenAddress(null, 64).bucket;          // "unknown"
 */
export function givenAddress(text: string | null, ipv6Prefix: number): ClientAddress {
  if (text === null) return { bucket: UNKNOWN_CLIENT };
  // an address is short: anything longer is no address, and is not kept
  return text.length <= 64 ? recentAddresses(`${ipv6Prefix}|${text}`) : readAddress(text, ipv6Prefix);
}

function readAddress(header: string, ipv6Prefix: number): ClientAddress {
  const address = parseAddress(header);
  if (!address) return { bucket: UNKNOWN_CLIENT };
  return Object.freeze({ address, text: addressText(address), bucket: addressBucket(address, ipv6Prefix) });
}

/** A flood repeats its addresses: each is parsed once per isolate. */
const recentAddresses = memo((prefixAndHeader: string) => {
  const bar = prefixAndHeader.indexOf("|");
  return readAddress(prefixAndHeader.slice(bar + 1), Number(prefixAndHeader.slice(0, bar)));
}, 4096);

/**
 * The API key from `header` of `request` (see `readKey`): one key, absent, or ambiguous.
 *
 * @example
 * readApiKey(new Request("https://x/", { headers: [["x-api-key", "K"], ["x-api-key", "K"]] }), "x-api-key"); // { kind: "ambiguous" }
 */
export function readApiKey(request: Request, header: string): KeyHeader {
  return readKey(header, request.headers.get(header));
}
