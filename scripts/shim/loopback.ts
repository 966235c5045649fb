import ipaddr from "ipaddr.js";

/**
 * Whether a host (a name, an address, an IPv6 address in brackets) is this machine: localhost,
 * 127.0.0.0/8, ::1 (or ::ffff:127.x). Any other name may resolve anywhere.
 *
 * @example
 * isLoopback("[::1]");        // true
 * isLoopback("gate.example"); // false
 */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, "$1");
  if (bare.toLowerCase() === "localhost") return true;
  return ipaddr.isValid(bare) && ipaddr.process(bare).range() === "loopback";
}
