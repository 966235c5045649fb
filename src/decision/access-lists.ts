import ipaddr from "ipaddr.js";
import { type Address, ambiguousAddress, embeddedIPv4Address, ipaddrText } from "./identity.ts";

/** An allow or a deny list: API keys by SHA-256 hex, client IPs by address or CIDR range (IPv4 and IPv6). */
export interface AccessLists {
  keys?: readonly string[];
  ips?: readonly string[];
}

type Range = [Address, number];

/** An address ("203.0.113.7") or CIDR range ("2001:db8::/32") in canonical form; undefined when it is neither. */
export function parseRange(entry: string): Range | undefined {
  if (ambiguousAddress(entry.split("/")[0]!)) return undefined;
  let range: Range;
  try {
    if (entry.includes("/")) range = ipaddr.parseCIDR(ipaddrText(entry));
    else {
      const address = ipaddr.parse(ipaddrText(entry));
      range = [address, address.kind() === "ipv4" ? 32 : 128];
    }
  } catch {
    return undefined;
  }
  const [net, bits] = range;
  // ::ffff:a.b.c.d/96+n is a.b.c.d/n: clients written either way arrive as IPv4
  if (net.kind() === "ipv6" && (net as ipaddr.IPv6).isIPv4MappedAddress() && bits >= 96) {
    return [(net as ipaddr.IPv6).toIPv4Address(), bits - 96];
  }
  return [net.kind() === "ipv6" ? new ipaddr.IPv6((net as ipaddr.IPv6).parts) : net, bits];
}

/**
 * One list as a check. `embedded`: an IPv4 entry also matches the 6to4, Teredo and NAT64
 * addresses made from its addresses — for the deny list alone. Their return traffic reaches
 * whoever relays those ranges (anyone may run a 6to4 relay), so they are that IPv4 caller to
 * deny, not to trust.
 */
function compileList(list: AccessLists | undefined, embedded: boolean) {
  const keys = new Set(list?.keys ?? []);
  const ranges = (list?.ips ?? []).map((entry) => parseRange(entry)!);
  const hasV4 = embedded && ranges.some(([net]) => net.kind() === "ipv4");
  return (ip: Address | undefined, keyHash: string | undefined) => {
    if (keyHash !== undefined && keys.has(keyHash)) return true;
    if (ip === undefined) return false;
    if (ranges.some(([net, bits]) => net.kind() === ip.kind() && ip.match(net, bits))) return true;
    // a 6to4, Teredo or NAT64 address is the IPv4 caller it is made from, as the gate counts it
    const v4 = hasV4 && ip.kind() === "ipv6" ? embeddedIPv4Address(ip as ipaddr.IPv6) : undefined;
    return v4 !== undefined && ranges.some(([net, bits]) => net.kind() === "ipv4" && v4.match(net, bits));
  };
}

export type AccessCheck = (ip: Address | undefined, keyHash: string | undefined) => "allow" | "deny" | undefined;

/**
 * The allow and deny lists as one check; deny wins over allow. Checked before any Redis call: a
 * listed caller costs no round trip. Entries and client addresses are compared in one canonical
 * form, so an IPv4-mapped IPv6 entry (`::ffff:198.51.100.0/120`) is its IPv4 range and matches
 * IPv4 clients; and an IPv4 deny entry matches the 6to4, Teredo and NAT64 addresses made from
 * its addresses (but local ones), which the gate counts as those IPv4 callers (an allow entry does not:
 * see `compileList`). Takes lists the configuration validated (every entry parses).
 *
 * @example
 * const lists = compileAccess({ deny: { ips: ["198.51.100.0/24"] }, allow: { keys: [sha256hex] } });
 * lists(parseAddress("::ffff:198.51.100.7"), undefined); // "deny"
 */
export function compileAccess(lists: { allow?: AccessLists; deny?: AccessLists }): AccessCheck {
  if (!lists.allow && !lists.deny) return () => undefined;
  const denied = compileList(lists.deny, true);
  const allowed = compileList(lists.allow, false);
  return (ip, keyHash) => {
    if (denied(ip, keyHash)) return "deny";
    if (allowed(ip, keyHash)) return "allow";
    return undefined;
  };
}
