import ipaddr from "ipaddr.js";

/**
 * Allow and deny lists: API keys by SHA-256 hex, client IPs by address or CIDR range (IPv4
 * and IPv6). Checked before any Redis call: a listed caller costs no round trip.
 *
 * @example
 * const lists = compileAccess({ deny: { ips: ["198.51.100.0/24"] }, allow: { keys: [sha256hex] } });
 * lists("198.51.100.7", undefined); // "deny"
 */
export interface AccessLists {
  keys?: readonly string[];
  ips?: readonly string[];
}

type Range = [ipaddr.IPv4 | ipaddr.IPv6, number];

/** An address ("203.0.113.7") or CIDR range ("2001:db8::/32"); undefined when it is neither. */
export function parseRange(entry: string): Range | undefined {
  try {
    if (entry.includes("/")) return ipaddr.parseCIDR(entry);
    const address = ipaddr.parse(entry);
    return [address, address.kind() === "ipv4" ? 32 : 128];
  } catch {
    return undefined;
  }
}

function compileList(list: AccessLists | undefined) {
  const keys = new Set(list?.keys ?? []);
  const ranges = (list?.ips ?? []).map((entry) => parseRange(entry)!);
  return (ip: ipaddr.IPv4 | ipaddr.IPv6 | undefined, keyHash: string | undefined) =>
    (keyHash !== undefined && keys.has(keyHash)) ||
    (ip !== undefined && ranges.some(([net, bits]) => net.kind() === ip.kind() && ip.match(net, bits)));
}

export type AccessCheck = (ip: string, keyHash: string | undefined) => "allow" | "deny" | undefined;

/** Deny wins over allow. Lists that were validated by the config (every entry parses). */
export function compileAccess(lists: { allow?: AccessLists; deny?: AccessLists }): AccessCheck {
  const denied = compileList(lists.deny);
  const allowed = compileList(lists.allow);
  if (!lists.allow && !lists.deny) return () => undefined;
  return (ip, keyHash) => {
    let address: ipaddr.IPv4 | ipaddr.IPv6 | undefined;
    try {
      address = ipaddr.process(ip); // an IPv4-mapped IPv6 address counts as its IPv4 one
    } catch {
      address = undefined;
    }
    if (denied(address, keyHash)) return "deny";
    if (allowed(address, keyHash)) return "allow";
    return undefined;
  };
}
