import { describe, expect, it } from "vitest";
import { compileAccess } from "./access-lists.ts";
import { addressBucket, addressText, ambiguousAddress, clientAddress, identify, ipIdentity, parseAddress, readApiKey, UNKNOWN_CLIENT } from "./identity.ts";

describe("client addresses", () => {
  it("read from CF-Connecting-IP are the same for a repeated header, and bucketed by each gate's own IPv6 prefix", () => {
    const from = (ip: string) => new Request("https://gate.example/", { headers: { "cf-connecting-ip": ip } });
    // the isolate remembers parsed addresses: a second gate with another prefix must not get the first one's bucket
    expect(clientAddress(from("2001:db8:1:2:3:4:5:6"), 64).bucket).toBe("2001:db8:1:2::/64");
    expect(clientAddress(from("2001:db8:1:2:3:4:5:6"), 48).bucket).toBe("2001:db8:1::/48");
    expect(clientAddress(from("2001:db8:1:2:3:4:5:6"), 64).bucket).toBe("2001:db8:1:2::/64");
    expect(clientAddress(from("not-an-ip"), 64)).toEqual({ bucket: UNKNOWN_CLIENT });
    expect(clientAddress(from(`192.0.2.1${" ".repeat(100)}`), 64)).toMatchObject({ text: "192.0.2.1" });
  });

  it("and API keys give one identity however often they are seen, a key apart from an address of the same text", async () => {
    const key = await identify("k", "192.0.2.1");
    expect(await identify("k", "192.0.2.1")).toEqual(key);
    expect((await identify("i", "192.0.2.1")).tag).not.toBe(key.tag);
    expect(await identify("k", "x".repeat(300))).toEqual(await identify("k", "x".repeat(300)));
  });

  it("count an application's identities that differ only by an unpaired surrogate apart, and keep every other identity's tag", async () => {
    const tags = await Promise.all(["ada\uD800", "ada\uDBFF", "ada\uDC00", "ada\uFFFD", "ada\uDC00\uD800", "ada\uD800\uDC00"].map(async (id) => (await identify("u", id)).tag));
    expect(new Set(tags).size).toBe(tags.length);
    expect((await identify("u", "ada\uD800")).tag).toBe(tags[0]);
    // a bucket counted before stays the same bucket: the tags as Redis holds them
    expect((await identify("u", "user-42")).tag).toBe("ubYlKo-6AJUnX80Dnwc8NHA");
    expect((await identify("u", "ada\u00e9\u{1F600}")).tag).toBe("u-AVHbiUVkQ-J3De-NL3MDg");
    expect((await identify("k", "sk-live-1")).tag).toBe("k-NydsXPuxkvzoqf8MyQ-fg");
  });

  it("have one canonical form for every spelling", () => {
    for (const spelling of ["2001:db8::1", "2001:DB8::1", "2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8:0:0::1", "fe80::1%eth0".replace("fe80", "2001:db8")]) {
      expect(addressText(parseAddress(spelling)!), spelling).toBe("2001:db8::1");
    }
    for (const spelling of ["192.0.2.1", "::ffff:192.0.2.1", "::FFFF:c000:201", "0:0:0:0:0:ffff:192.0.2.1", " 192.0.2.1 "]) {
      expect(addressText(parseAddress(spelling)!), spelling).toBe("192.0.2.1");
    }
    expect(parseAddress("not-an-ip")).toBeUndefined();
    // IPv4 that readers disagree on (inet_aton reads 010 as octal 8) is no address at all
    for (const spelling of ["192.000.002.077", "010.0.0.1", "::ffff:010.0.0.1", "0xc0.0.2.1", "3221225985", "192.0.2"]) {
      expect(parseAddress(spelling), spelling).toBeUndefined();
      expect(ambiguousAddress(spelling), spelling).toMatch(/^IPv4 written with leading zeros or in another base/);
    }
    for (const spelling of ["0.0.0.0", "192.0.2.100", "::ffff:192.0.2.1", "2001:db8::1", "garbage"]) expect(ambiguousAddress(spelling), spelling).toBeUndefined();
    expect(parseAddress("")).toBeUndefined();
  });

  it("read an IPv4-compatible address (::192.0.2.1) as the one IPv6 address its hex spelling (::c000:201) is, not as IPv4", () => {
    // ipaddr.js reads "::a.b.c.d" as ::ffff:a.b.c.d: one address, two identities, and an IPv4 client's
    for (const [dotted, hex] of [
      ["::192.0.2.1", "::c000:201"],
      ["::0.0.0.1", "::1"],
      ["::0.0.0.0", "::"],
      ["::1.2.3.4%eth0", "0::102:304"],
    ] as const) {
      expect(addressText(parseAddress(dotted)!), dotted).toBe(addressText(parseAddress(hex)!));
      expect(ipIdentity(dotted, 64), dotted).toBe(ipIdentity(hex, 64));
      expect(ipIdentity(dotted, 128), dotted).toBe(ipIdentity(hex, 128));
    }
    expect(ipIdentity("::192.0.2.1", 128)).not.toBe(ipIdentity("192.0.2.1", 128));
  });

  it("are counted per IPv6 prefix, IPv4 per address", () => {
    expect(addressBucket(parseAddress("2001:db8:1:2:3:4:5:6")!, 64)).toBe("2001:db8:1:2::/64");
    expect(addressBucket(parseAddress("2001:db8:1:2:3:4:5:6")!, 48)).toBe("2001:db8:1::/48");
    expect(addressBucket(parseAddress("2001:db8:1:2:3:4:5:6")!, 56)).toBe("2001:db8:1::/56");
    expect(addressBucket(parseAddress("2001:db8:1:2ff:3:4:5:6")!, 56)).toBe("2001:db8:1:200::/56");
    expect(addressBucket(parseAddress("2001:db8:1:2:3:4:5:6")!, 128)).toBe("2001:db8:1:2:3:4:5:6/128");
    expect(addressBucket(parseAddress("::ffff:198.51.100.7")!, 64)).toBe("198.51.100.7");
    expect(ipIdentity("2001:DB8:1:2::99", 64)).toBe("2001:db8:1:2::/64");
    expect(ipIdentity("garbage", 64)).toBe(UNKNOWN_CLIENT);
  });

  it("counts an address of a transition range as the IPv4 address it is made from, and no look-alike", () => {
    for (const prefix of [48, 64, 128]) {
      // 6to4 (RFC 3056), Teredo (RFC 4380's own example: client 192.0.2.45), NAT64 (RFC 6052)
      expect(ipIdentity("2002:c000:207:1::5", prefix)).toBe("192.0.2.7");
      expect(ipIdentity("2002:c000:0207:ffff:1:2:3:4", prefix)).toBe("192.0.2.7");
      expect(ipIdentity("2001:0:4136:e378:8000:63bf:3fff:fdd2", prefix)).toBe("192.0.2.45");
      expect(ipIdentity("64:ff9b::192.0.2.33", prefix)).toBe("192.0.2.33");
      expect(ipIdentity("64:FF9B::C000:221", prefix)).toBe("192.0.2.33");
    }
    // neighbours of those ranges are networks like any other
    expect(ipIdentity("2003:c000:207:1::5", 64)).toBe("2003:c000:207:1::/64");
    expect(ipIdentity("2001:1:4136:e378:8000:63bf:3fff:fdd2", 64)).toBe("2001:1:4136:e378::/64");
    expect(ipIdentity("64:ff9b:1::c000:221", 64)).toBe("64:ff9b:1::/64");
    expect(ipIdentity("1:64:ff9b::c000:221", 64)).toBe("1:64:ff9b::/64");
    // an IPv4 address no client comes from (private, loopback, reserved) makes no IPv4 caller
    expect(ipIdentity("2002:a00:1:1::1", 64)).toBe("2002:a00:1:1::/64");
    expect(ipIdentity("64:ff9b::127.0.0.1", 64)).toBe("64:ff9b::/64");
    expect(ipIdentity("2001:0:4136:e378:8000:63bf:f5ff:fffe", 64)).toBe("2001:0:4136:e378::/64");
  });
});

describe("the API-key header", () => {
  const read = (...values: string[]) => {
    const headers = new Headers();
    for (const v of values) headers.append("x-api-key", v);
    return readApiKey(new Request("https://x/", { headers }), "x-api-key");
  };

  it("is one key, absent, or ambiguous — never a new identity made of two", () => {
    expect(read()).toEqual({ kind: "absent" });
    expect(read("   ")).toEqual({ kind: "absent" });
    expect(read(" K ")).toEqual({ kind: "key", key: "K" });
    expect(read("K", "K")).toEqual({ kind: "ambiguous" });
    expect(read("K", "")).toEqual({ kind: "ambiguous" });
    expect(read("K, K")).toEqual({ kind: "ambiguous" });
    expect(read("a,b")).toEqual({ kind: "ambiguous" });
  });
});

describe("allow and deny lists", () => {
  it("compare entries and clients in one canonical form, IPv4-mapped entries included", () => {
    const lists = compileAccess({ deny: { ips: ["::ffff:198.51.100.0/120", "2001:DB8:BAD::/48"] }, allow: { ips: ["::FFFF:C000:0205"] } });
    expect(lists(parseAddress("198.51.100.9"), undefined)).toBe("deny");
    expect(lists(parseAddress("::ffff:198.51.100.200"), undefined)).toBe("deny");
    expect(lists(parseAddress("198.51.101.1"), undefined)).toBeUndefined();
    expect(lists(parseAddress("2001:db8:bad:1::1"), undefined)).toBe("deny");
    expect(lists(parseAddress("192.0.2.5"), undefined)).toBe("allow");
    expect(lists(undefined, undefined)).toBeUndefined();
  });

  it("read an IPv4-compatible entry (::192.0.2.1) as the IPv6 address it is, matching its hex spelling and not the IPv4 client", () => {
    const lists = compileAccess({ deny: { ips: ["::192.0.2.1", "::198.51.100.0/120"] } });
    expect(lists(parseAddress("::c000:201"), undefined)).toBe("deny");
    expect(lists(parseAddress("::192.0.2.1"), undefined)).toBe("deny");
    expect(lists(parseAddress("::c633:6409"), undefined)).toBe("deny");
    expect(lists(parseAddress("192.0.2.1"), undefined)).toBeUndefined();
    expect(lists(parseAddress("198.51.100.9"), undefined)).toBeUndefined();
  });
});
