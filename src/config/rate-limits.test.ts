import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { matchCraftedPath } from "../../test/helpers/crafted-paths.ts";
import { configurationWarnings, denialCacheFit, parseRateLimits, pathPattern } from "./rate-limits.ts";

/** Rules on these path globs, in order (one rule each, in the default tier), as the gate compiles them. */
function compiledPaths(...globs: string[]) {
  const parsed = parseRateLimits({ rules: globs.map((path, i) => ({ name: `p${i}`, limit: 1, window: "1s", path })) });
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.config.tiers.get("default")!;
}

const errorsOf = (raw: unknown) => {
  const r = parseRateLimits(raw);
  if (r.ok) throw new Error("expected the configuration to be refused");
  return r.errors;
};

describe("parseRateLimits", () => {
  it("accepts the per-IP shape and normalises windows of every unit to ms", () => {
    const r = parseRateLimits({ rules: ["500ms", "10s", "2m", "1h", "1d", 250].map((window, i) => ({ name: `r${i}`, limit: 5, window })) });
    expect(r.ok && r.config.tiers.get("default")!.map((x) => x.windowMs)).toEqual([500, 10_000, 120_000, 3_600_000, 86_400_000, 250]);
  });

  it("refuses a list of more than 3000 rules, naming it, where the script that decides over them could not take them in one call", () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `r${i}`, limit: 5, window: "1m" }));
    expect(parseRateLimits({ rules: many(3000), denialCacheSize: 50 }).ok).toBe(true);
    expect(errorsOf({ rules: many(3001), denialCacheSize: 50 })).toEqual([expect.stringMatching(/^RATE_LIMITS\.rules: has 3001 rules: at most 3000/)]);
    expect(errorsOf({ tiers: { free: { rules: many(4000) } }, denialCacheSize: 50 })).toEqual([
      expect.stringMatching(/^RATE_LIMITS\.tiers\.free\.rules: has 4000 rules: at most 3000/),
    ]);
    expect(errorsOf({ rules: many(1), addressRules: many(3001), denialCacheSize: 50 })).toEqual([
      expect.stringMatching(/^RATE_LIMITS\.addressRules: has 3001 rules: at most 3000/),
    ]);
  });

  it("accepts a JSON string as well as an object, with the documented defaults", () => {
    const r = parseRateLimits('{"rules":[{"name":"default","limit":5,"window":"10s"}]}');
    expect(r.ok && r.config).toMatchObject({ prefix: "sg", keyRequired: false, defaultTier: "default", denialCacheSize: 10_000, clock: "redis" });
    expect(r.ok && r.config.tiers.get("default")![0]).toMatchObject({ limit: 5, windowMs: 10_000, cost: 1, fail: "open", timeoutMs: 1000 });
  });

  it("accepts the tiered shape and resolves per-rule fail and timeout over the global ones", () => {
    const hash = "a".repeat(64);
    const r = parseRateLimits({
      identity: { header: "X-API-Key", required: true },
      defaultTier: "free",
      fail: "closed",
      timeout: 250,
      tiers: { free: { rules: [{ name: "minute", limit: 10, window: "60s" }] }, paid: { rules: [{ name: "minute", limit: 100, window: "60s", fail: "open", timeout: 900 }] } },
      keys: { [hash]: "paid" },
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.config.keyHeader).toBe("x-api-key");
    expect(r.config.keyTiers.get(hash)).toBe("paid");
    expect(r.config.tiers.get("free")![0]).toMatchObject({ fail: "closed", timeoutMs: 250 });
    expect(r.config.tiers.get("paid")![0]).toMatchObject({ fail: "open", timeoutMs: 900 });
  });

  it('names a number or a boolean written as a string (limit = "100", required = "true") and says to drop the quotes', () => {
    const errors = errorsOf({
      identity: { header: "x-api-key", required: "true" },
      timeout: "1500",
      rules: [{ name: "minute", limit: "100", window: "1m", cost: "2" }],
    });
    expect(errors).toEqual(
      expect.arrayContaining([
        'RATE_LIMITS.rules[0].limit: must be a number, not the string "100": write it without quotes',
        'RATE_LIMITS.rules[0].cost: must be a number, not the string "2": write it without quotes',
        'RATE_LIMITS.timeout: must be a number, not the string "1500": write it without quotes',
        'RATE_LIMITS.identity.required: must be true or false, not the string "true": write it without quotes',
      ]),
    );
    // a string that is no number keeps the plain message
    expect(errorsOf({ rules: [{ name: "minute", limit: "lots", window: "1m" }] })).toEqual([expect.not.stringContaining("without quotes")]);
  });

  it('names a timeout written as a duration (timeout = "2s", as a window is written) and says it in milliseconds', () => {
    const errors = errorsOf({ timeout: "2s", rules: [{ name: "minute", limit: 100, window: "1m", timeout: "500ms" }] });
    expect(errors).toEqual([
      'RATE_LIMITS.rules[0].timeout: must be a number of milliseconds, not the string "500ms": write 500',
      'RATE_LIMITS.timeout: must be a number of milliseconds, not the string "2s": write 2000; timeout is the rate-limit store\'s budget: a time limit on the origin is originTimeout, which takes "2s"',
    ]);
    // a number it may not take is never the one to write
    expect(errorsOf({ timeout: "40s", rules: [{ name: "minute", limit: 100, window: "1m", timeout: "0s" }] })).toEqual([
      'RATE_LIMITS.rules[0].timeout: must be a number of milliseconds from 1 to 30000, not the string "0s" (0 ms)',
      'RATE_LIMITS.timeout: must be a number of milliseconds from 1 to 30000, not the string "40s" (40000 ms); timeout is the rate-limit store\'s budget: a time limit on the origin is originTimeout, which takes "40s"',
    ]);
  });

  it("says of the top-level timeout written as a duration that it is the store's, and that originTimeout is the origin's", () => {
    expect(errorsOf({ timeout: "30s", rules: [{ name: "minute", limit: 100, window: "1m" }] })).toEqual([
      'RATE_LIMITS.timeout: must be a number of milliseconds, not the string "30s": write 30000; timeout is the rate-limit store\'s budget: a time limit on the origin is originTimeout, which takes "30s"',
    ]);
    // a rule's timeout is its own store budget, and the library (options) has no origin: neither is pointed there
    expect(errorsOf({ rules: [{ name: "minute", limit: 100, window: "1m", timeout: "2s" }] })[0]).not.toContain("originTimeout");
    const library = parseRateLimits({ timeout: "2s", rules: [{ name: "minute", limit: 100, window: "1m" }] }, "options");
    expect(library.ok ? [] : library.errors).toEqual(['options.timeout: must be a number of milliseconds, not the string "2s": write 2000']);
  });

  it("takes originTimeout as denialCacheMaxAge is written, a duration or milliseconds, and leaves the origin unbounded without it", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    const originTimeoutMs = (originTimeout?: unknown) => {
      const r = parseRateLimits(originTimeout === undefined ? { rules } : { rules, originTimeout });
      if (!r.ok) throw new Error(r.errors.join("\n"));
      return r.config.originTimeoutMs;
    };
    expect([originTimeoutMs(), originTimeoutMs("30s"), originTimeoutMs("500ms"), originTimeoutMs("1h"), originTimeoutMs(2500)]).toEqual([undefined, 30_000, 500, 3_600_000, 2500]);
  });

  it("names originTimeout for each value it refuses, with the duration meant where there is one", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    const said = (originTimeout: unknown) => errorsOf({ rules, originTimeout });
    const notDuration = 'RATE_LIMITS.originTimeout: must be a duration like "10s", "1m", "500ms" or a number of milliseconds';
    expect([said(0), said(-5), said(1.5), said("0s"), said("2h"), said(3_600_001)]).toEqual([
      ["RATE_LIMITS.originTimeout: must be at least 1 ms"],
      ["RATE_LIMITS.originTimeout: must be at least 1 ms"],
      ["RATE_LIMITS.originTimeout: must be a whole number of milliseconds"],
      ["RATE_LIMITS.originTimeout: must be at least 1 ms"],
      ["RATE_LIMITS.originTimeout: must be at most 1h"],
      ["RATE_LIMITS.originTimeout: must be at most 3600000 ms (1h)"],
    ]);
    expect([said("30 s"), said("1.5s"), said("30"), said(true), said({ seconds: 30 })]).toEqual([
      [`${notDuration}; did you mean "30s"?`],
      [`${notDuration}; did you mean "1500ms"?`],
      [`${notDuration}; did you mean "30ms"?`],
      [notDuration],
      [notDuration],
    ]);
  });

  it("warns of an originTimeout under a second, which a number of seconds written alone would be, and refuses nothing", () => {
    const warned = (originTimeout: unknown) => {
      const r = parseRateLimits({ rules: [{ name: "m", limit: 1, window: "1s" }], originTimeout });
      if (!r.ok) throw new Error(r.errors.join("\n"));
      return configurationWarnings(r.config).filter((w) => w.includes("originTimeout"));
    };
    expect(warned(30)).toEqual([
      'originTimeout is 30 ms: a request whose origin takes longer than that to start its answer gets a 504 origin-timeout. A number alone is milliseconds; if you meant seconds, write "30s". Keep it if your origin answers within 30 ms.',
    ]);
    expect(warned("999ms")).toHaveLength(1);
    expect([warned("1s"), warned(30_000), warned(undefined)]).toEqual([[], [], []]);
  });

  it("refuses list addresses that readers disagree on, naming the entry, instead of reading 010 as octal", () => {
    const errors = errorsOf({ rules: [{ name: "m", limit: 5, window: "10s" }], deny: { ips: ["192.000.002.077", "10.0.0.0/8", "010.0.0.0/8"] }, allow: { ips: ["nonsense"] } });
    const advice = "has IPv4 written with leading zeros or in another base, which readers disagree on: write it in plain dotted decimal (like 192.0.2.7)";
    expect(errors).toEqual([
      'RATE_LIMITS.allow.ips[0]: "nonsense" is not an IP address or CIDR range',
      `RATE_LIMITS.deny.ips[0]: "192.000.002.077" ${advice}`,
      `RATE_LIMITS.deny.ips[2]: "010.0.0.0/8" ${advice}`,
    ]);
  });

  it("matches a glob part by part exactly as one regular expression of it would", () => {
    const text = fc.stringMatching(/^[abAB/.ſ*-]{0,10}$/);
    fc.assert(
      fc.property(text, fc.stringMatching(/^[abAB/.ſsS-]{0,14}$/, { size: "max" }), fc.boolean(), (glob, path, caseSensitive) => {
        const pattern = pathPattern(glob, caseSensitive);
        expect(pattern.test(path), `${glob} ~ ${path}`).toBe(new RegExp(pattern.source, caseSensitive ? "su" : "isu").test(path));
      }),
      { numRuns: 5000 },
    );
  });

  it("matches the dotted and dotless i as i when paths match case-insensitively, as Java's equalsIgnoreCase does", () => {
    // Character.toLowerCase('İ') is 'i' and Character.toUpperCase('ı') is 'I': Spring's
    // case-insensitive patterns route /admİn and /admın to /admin; Unicode case folding does not
    const pattern = pathPattern("/admin/*", false);
    for (const p of ["/adm\u0130n/x", "/adm\u0131n/x", "/ADM\u0131N/x"]) expect(pattern.test(p), p).toBe(true);
    expect(pathPattern("/adm\u0131n", false).test("/ADMIN")).toBe(true);
    expect(pathPattern("/admin/*", true).test("/adm\u0131n/x")).toBe(false);
  });

  it("matches a glob of several stars against a long path in time linear in its length", () => {
    // one regular expression of "/a/*/b/*/b/*/c" backtracks through every split: a minute for 16 KB
    const pattern = pathPattern("/a/*/b/*/b/*/c", false);
    const started = performance.now();
    expect(pattern.test(`/a/${"/b/".repeat(5000)}x`)).toBe(false);
    expect(pattern.test(`/a/${"/b/".repeat(5000)}/c`)).toBe(true);
    expect(performance.now() - started).toBeLessThan(2000); // linear: a few ms
  });

  it("matches a long path of many match forms against a hundred case-insensitive rules in time linear in its length", () => {
    const { matched, ms } = matchCraftedPath();
    expect(matched).toEqual([]);
    expect(ms).toBeLessThan(2000); // linear: tens of ms; İ folded once per rule and form: seconds
  });

  it("a rule on a script covers the paths beneath it, which servers that pass PATH_INFO run as that script", () => {
    // Apache and IIS run /xmlrpc.php/x as /xmlrpc.php (PATH_INFO /x), ASP.NET /default.aspx/x too
    const [php, rpc, version, pdf] = compiledPaths("/*.php", "/xmlrpc.php", "/api/v1.0", "/files/report.pdf");
    for (const p of ["/wp-login.php/x", "/a/index.php/x/y.css"]) expect(php?.path?.test(p), p).toBe(true);
    for (const p of ["/xmlrpc.php/x", "/XMLRPC.PHP/", "/xmlrpc.php/x.php"]) expect(rpc?.path?.test(p), p).toBe(true);
    expect(php?.path?.test("/index/x")).toBe(false);
    expect(rpc?.path?.test("/xmlrpc/x")).toBe(false); // the file's name without its suffix names no file
    expect(version?.path?.test("/api/v1.0/users")).toBe(false); // a version, not a file
    expect(pdf?.path?.test("/files/report.pdf/x")).toBe(false); // a document, which no server runs
    // a glob's file of any name is no front controller: what follows it is not every path
    const [info] = compiledPaths("/*.php/*");
    expect(info?.path?.test("/index.php/x")).toBe(true);
    expect(info?.path?.test("/v1/users")).toBe(false);
    // nor is a script followed only by wildcards: without the script's segment it is every path
    // (or every path of its directory), which a rule on the script's PATH_INFO does not mean
    const [rpcInfo, cgiInfo, api, rpcSlash] = compiledPaths("/xmlrpc.php/*", "/cgi-bin/app.cgi/**", "/index.php/api/*", "/xmlrpc.php/");
    // nor one followed by a slash alone: without it, the home page
    expect(rpcSlash?.path?.test("/xmlrpc.php/")).toBe(true);
    expect(rpcSlash?.path?.test("/")).toBe(false);
    expect(rpcInfo?.path?.test("/xmlrpc.php/x")).toBe(true);
    expect(rpcInfo?.path?.test("/v1/users")).toBe(false);
    expect(cgiInfo?.path?.test("/cgi-bin/other.cgi")).toBe(false);
    expect(api?.path?.test("/api/login")).toBe(true); // a route follows the script: its form without it stays
    // a glob cut at a ? or # (a query written into a rule's path) or without session data is
    // not every path either
    for (const glob of ["/*?debug=*", "/*#x", "/(S(*))/*"]) expect(compiledPaths(glob)[0]?.path?.test("/v1/users"), glob).toBe(false);
  });

  it("a rule on a Next.js data route covers the page it runs, and a data route of wildcards alone is not every path", () => {
    // Next.js runs /_next/data/<build id>/search.json as the page /search (its getServerSideProps)
    const [search, anyData] = compiledPaths("/_next/data/*/search.json", "/_next/data/*.json");
    expect(search?.path?.test("/search")).toBe(true);
    expect(search?.path?.test("/_next/data/b1d/search.json")).toBe(true);
    expect(anyData?.path?.test("/_next/data/b1d/v1/users.json")).toBe(true);
    expect(anyData?.path?.test("/v1/users")).toBe(false);
  });

  it("a rule on a directory's index script covers the directory, which servers run it for, / included", () => {
    // Apache's DirectoryIndex and nginx's index run /v1/index.php for /v1/, and /index.php for /
    const [v1, home, anyIndex] = compiledPaths("/v1/index.php", "/index.php", "/app/*/index.php");
    // (a pattern is tested against a request's forms, which hold /v1 for /v1/)
    for (const p of ["/v1", "/V1"]) expect(v1?.path?.test(p), p).toBe(true);
    expect(home?.path?.test("/")).toBe(true);
    expect(home?.path?.test("/v1/")).toBe(false);
    // a wildcard before the index name: the directory would be every path beneath /app/
    expect(anyIndex?.path?.test("/app/x/index.php")).toBe(true);
    expect(anyIndex?.path?.test("/app/x/y")).toBe(false);
  });

  it("compiles path globs and upper-cases methods", () => {
    const r = parseRateLimits({ rules: [{ name: "w", limit: 1, window: "1s", path: "/v1/*.json", methods: ["post"] }] });
    const rule = r.ok ? r.config.tiers.get("default")![0]! : undefined;
    expect(rule?.path?.test("/v1/a/b.json")).toBe(true);
    expect(rule?.path?.test("/v2/a.json")).toBe(false);
    expect(rule?.methods?.has("POST")).toBe(true);
  });

  it("matches a glob written with a format suffix or ; parameters also without them, as a lenient origin routes", () => {
    const pathOf = (path: string) => {
      const r = parseRateLimits({ rules: [{ name: "w", limit: 1, window: "1s", path }] });
      return r.ok ? r.config.tiers.get("default")![0]!.path! : undefined;
    };
    expect(pathOf("/v1/users.json")?.test("/v1/users")).toBe(true);
    expect(pathOf("/v1/users.json")?.test("/v1/users.json")).toBe(true);
    expect(pathOf("/v1/users.json")?.test("/v1/user")).toBe(false);
    // a suffix after a wildcard names a kind of file: the glob keeps it, or it would cover every path
    expect(pathOf("/*.css")?.test("/api/users")).toBe(false);
    expect(pathOf("/*.css")?.test("/")).toBe(false);
    expect(pathOf("/v1/*.json")?.test("/v1/a/b.json")).toBe(true);
    expect(pathOf("/a;v=1/*.css")?.test("/a/x.css")).toBe(true);
    expect(pathOf("/a;v=1/*")?.test("/a/b")).toBe(true);
    // a glob with none of them is one pattern, as written
    expect(pathOf("/v1/*")?.source).toBe("^/v1/.*$");
  });

  it("names the field a misspelt one was meant to be, and the value a misspelt choice was", () => {
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "10s", limt: 3 }] })).toContain(
      'RATE_LIMITS.rules[0].limt: unknown field (allowed: name, limit, window, cost, path, methods, fail, timeout, shadow); did you mean "limit"?',
    );
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s" }], identity: { unknownkeys: "reject" } })).toEqual([
      'RATE_LIMITS.identity.unknownkeys: unknown field (allowed: header, required, unknownKeys); did you mean "unknownKeys"?',
    ]);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s" }], identity: { unknownKeys: "rejected" } })).toEqual([
      'RATE_LIMITS.identity.unknownKeys: must be "defaultTier", "reject" or "ip"; did you mean "reject"?',
    ]);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s" }], clock: "Edge" })).toEqual(['RATE_LIMITS.clock: must be "redis" or "edge"; did you mean "edge"?']);
    const tiers = { free: { rules: [{ name: "d", limit: 5, window: "1s" }] }, paid: { rules: [{ name: "d", limit: 50, window: "1s" }] } };
    expect(errorsOf({ identity: { header: "x-api-key" }, tiers, defaultTier: "fre" })).toEqual([
      'RATE_LIMITS.defaultTier: "fre" is not a tier (tiers: free, paid); did you mean "free"?',
    ]);
    // nothing close: the list alone, never a wrong guess
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s", colour: "red" }] })).toEqual([
      "RATE_LIMITS.rules[0].colour: unknown field (allowed: name, limit, window, cost, path, methods, fail, timeout, shadow)",
    ]);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s", fail: "maybe" }] })).toEqual(['RATE_LIMITS.rules[0].fail: must be "open" or "closed"']);
  });

  it("tells a duration written another way how it is written", () => {
    const said = (window: unknown) => errorsOf({ rules: [{ name: "d", limit: 5, window }] })[0];
    const meant = (spelt: string) => `RATE_LIMITS.rules[0].window: must be a duration like "10s", "1m", "500ms" or a number of milliseconds; did you mean "${spelt}"?`;
    expect(["10 s", "1min", "1.5s", "2 Hours", "10S", "30 seconds", "10000"].map(said)).toEqual(["10s", "1m", "1500ms", "2h", "10s", "30s", "10000ms"].map(meant));
    // no number and unit to read, or none a whole number of ms: the rule alone
    expect([said("fast"), said("0.5ms"), said("1e3")]).toEqual(
      Array(3).fill('RATE_LIMITS.rules[0].window: must be a duration like "10s", "1m", "500ms" or a number of milliseconds'),
    );
    // "M" is a month where ISO 8601 and date libraries write durations: "1m", a minute, would be a
    // window some 43,000 times shorter than meant, so the guess is not offered
    expect([said("1M"), said("3 M")]).toEqual(Array(2).fill('RATE_LIMITS.rules[0].window: must be a duration like "10s", "1m", "500ms" or a number of milliseconds'));
    // a unit is one of the words, not any name an object answers to: "1 constructor" was offered
    // as 'did you mean "1function Object() { [native code] }"?'
    expect([said("1 constructor"), said("10 Constructor")]).toEqual(
      Array(2).fill('RATE_LIMITS.rules[0].window: must be a duration like "10s", "1m", "500ms" or a number of milliseconds'),
    );
    // a number past what a whole number of ms holds exactly would be offered as "1e+23s", no duration at all
    expect(said("100000000000000000000000 s")).toBe('RATE_LIMITS.rules[0].window: must be a duration like "10s", "1m", "500ms" or a number of milliseconds');
    expect([said(0), said(1.5), said(400 * 86_400_000)]).toEqual([
      "RATE_LIMITS.rules[0].window: must be at least 1 ms",
      "RATE_LIMITS.rules[0].window: must be a whole number of milliseconds",
      "RATE_LIMITS.rules[0].window: must be at most 31622400000 ms (366d)",
    ]);
  });

  it("reads a long duration no further than a short one (no suggestion past 64 characters)", () => {
    // its pattern backtracked over a long run of blanks: "1", 100,000 spaces and "!" took
    // seconds of CPU, an admin body's window as much as the configuration's
    const said = (window: unknown) => errorsOf({ rules: [{ name: "d", limit: 5, window }] });
    const rule = 'RATE_LIMITS.rules[0].window: must be a duration like "10s", "1m", "500ms" or a number of milliseconds';
    expect(said(`1${" ".repeat(100_000)}s`)).toEqual([rule]);
    expect(said(`1${" ".repeat(100_000)}!`)).toEqual([rule]);
    expect(said(`${" ".repeat(20)}10 s${" ".repeat(20)}`)).toEqual([`${rule}; did you mean "10s"?`]);
  });

  it("refuses an array where a table goes as one error, naming the fields the table takes", () => {
    // [[tiers.pro]] in TOML where [[tiers.pro.rules]] was meant
    expect(errorsOf({ tiers: { pro: [{ name: "d", limit: 5, window: "1s" }] } })).toEqual([
      "RATE_LIMITS.tiers.pro: must be an object (a table), not an array: the fields it takes are rules",
    ]);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s" }], identity: ["x-api-key"] })).toEqual([
      "RATE_LIMITS.identity: must be an object (a table), not an array: the fields it takes are header, required, unknownKeys",
    ]);
  });

  it("warns of a rule's method that is no standard one, naming the rule and the method meant, and refuses nothing", () => {
    const warned = (raw: unknown) => {
      const r = parseRateLimits(raw);
      if (!r.ok) throw new Error(r.errors.join("\n"));
      return configurationWarnings(r.config).filter((w) => w.includes("method"));
    };
    expect(warned({ rules: [{ name: "reads", limit: 5, window: "1s", methods: ["gte", "post"] }] })).toEqual([
      'rule "reads" (tier default) names the method "GTE", which is no standard HTTP method; did you mean "GET"?: the rule counts only requests sent with that exact method. Leave it if your API takes it (a custom method such as PURGE).',
    ]);
    expect(warned({ rules: [{ name: "r", limit: 5, window: "1s" }], addressRules: [{ name: "purges", limit: 5, window: "1s", methods: ["PURGE"] }] })).toEqual([
      expect.stringMatching(/^rule "purges" \(addressRules\) names the method "PURGE", which is no standard HTTP method: the rule counts only/),
    ]);
    expect(
      warned({
        tiers: { paid: { rules: [{ name: "w", limit: 5, window: "1s", methods: ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"] }] } },
        defaultTier: "paid",
        identity: { header: "x-api-key", unknownKeys: "reject" },
      }),
    ).toEqual([]);
  });

  it("warns of a rule path written as a router writes a route (/v1/users/:id), which matches only its own text, naming the glob to write", () => {
    const warned = (path: string) => {
      const r = parseRateLimits({ rules: [{ name: "users", limit: 5, window: "1s", path }] });
      if (!r.ok) throw new Error(r.errors.join("\n"));
      return configurationWarnings(r.config).filter((w) => w.includes("route parameter"));
    };
    expect(warned("/v1/users/:id")).toEqual([
      expect.stringMatching(/^rule "users" \(tier default\) has the path "\/v1\/users\/:id": ":id" is a route parameter.*write "\/v1\/users\/\*"/),
    ]);
    expect(warned("/v1/users/:id{[0-9]+}/avatar")[0]).toMatch(/write "\/v1\/users\/\*\/avatar"/);
    // a colon inside a segment, or an address in the path, is the API's own text
    expect(warned("/v1/users/1:undelete")).toEqual([]);
    expect(warned("/ip/::1")).toEqual([]);
  });

  it("warns of a route parameter in every router's spelling of one: a Hono regex holding braces, an Express regex or modifier, a name with a hyphen or a suffix", () => {
    const glob = (path: string) => {
      const r = parseRateLimits({ rules: [{ name: "users", limit: 5, window: "1s", path }] });
      if (!r.ok) throw new Error(r.errors.join("\n"));
      const [warning] = configurationWarnings(r.config).filter((w) => w.includes("route parameter"));
      return warning === undefined ? undefined : /write "([^"]*)"$/.exec(warning)?.[1];
    };
    // each matched only its own text, so the rule counted none of the route's requests
    expect(glob("/v1/users/:id{[0-9]{4}}")).toBe("/v1/users/*");
    expect(glob("/v1/users/:id([0-9]+)/avatar")).toBe("/v1/users/*/avatar");
    expect(glob("/v1/files/:path*")).toBe("/v1/files/*");
    expect(glob("/v1/orgs/:org-id/users")).toBe("/v1/orgs/*/users");
    expect(glob("/v1/users/:id.json")).toBe("/v1/users/*");
    expect(glob("/v1/flights/:from-:to")).toBe("/v1/flights/*");
    // a colon inside a segment, an address, or a colon written %3A is the API's own text
    for (const path of ["/v1/users/1:undelete", "/ip/::1", "/v1/%3Abatch"]) expect(glob(path), path).toBeUndefined();
  });

  it("names the field and the problem for each error", () => {
    expect(errorsOf({ rules: [{ name: "default", limit: 0, window: "10s" }] })).toEqual(["RATE_LIMITS.rules[0].limit: must be at least 1"]);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "10 sec" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.window: must be a duration/);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "10s", limt: 3 }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.limt: unknown field/);
    expect(errorsOf({ rules: [{ name: "has space", limit: 5, window: "1s" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.name: must be 1-32 characters/);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s", fail: "maybe" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.fail: must be "open" or "closed"/);
    expect(errorsOf({ rules: [{ name: "d", limit: 2, window: "1s", cost: 3 }] })).toEqual(["RATE_LIMITS.rules[0].cost: is larger than limit (2): every request would be denied"]);
    expect(
      errorsOf({
        rules: [
          { name: "d", limit: 2, window: "1s" },
          { name: "d", limit: 3, window: "2s" },
        ],
      }),
    ).toEqual(['RATE_LIMITS.rules[1].name: "d" is used twice']);
    expect(errorsOf({ rules: [{ name: "d", limit: 1, window: "367d" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.window: must be at most 366d/);
    expect(errorsOf({ rules: [{ name: "d", limit: 1, window: "1s" }], denialCacheSize: 50_001 })[0]).toMatch(
      /^RATE_LIMITS\.denialCacheSize: must be at most 50000: each entry takes about 0\.6 KB/,
    );
    expect(parseRateLimits({ rules: [{ name: "d", limit: 1, window: "1s" }], denialCacheSize: 50_000 }).ok).toBe(true);
    // an entry holds a decision over every rule of its list: more rules, fewer entries fit
    const many = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `rule-${i}`, limit: 1, window: "1s" }));
    expect(parseRateLimits({ rules: many(21) }).ok).toBe(true);
    expect(errorsOf({ rules: many(25) })).toEqual([
      `RATE_LIMITS.denialCacheSize: the default, 10000, is more than fit in an isolate with 25 rules in one list: each entry holds a decision over them, so at most ${denialCacheFit(25)}`,
    ]);
    expect(parseRateLimits({ rules: many(25), denialCacheSize: denialCacheFit(25) }).ok).toBe(true);
    expect(errorsOf({ tiers: { a: { rules: many(2) } }, defaultTier: "a", identity: { header: "k" }, addressRules: many(40), denialCacheSize: 8000 })[0]).toMatch(
      /with 40 rules in one list/,
    );
  });

  it("refuses shapes that contradict themselves", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    expect(errorsOf({})).toEqual(['RATE_LIMITS: needs "rules" or "tiers"']);
    expect(errorsOf({ rules, tiers: { a: { rules } }, defaultTier: "a", identity: { header: "k" } })).toContain('RATE_LIMITS.rules: give either "rules" or "tiers", not both');
    expect(errorsOf({ tiers: { a: { rules } }, identity: { header: "k" } })).toEqual(["RATE_LIMITS.defaultTier: is required with tiers"]);
    expect(errorsOf({ tiers: { a: { rules } }, defaultTier: "b", identity: { header: "k" } })).toEqual(['RATE_LIMITS.defaultTier: "b" is not a tier (tiers: a)']);
    expect(errorsOf({ tiers: { a: { rules } }, defaultTier: "a" })).toEqual(["RATE_LIMITS.identity.header: is required with tiers: tiers are chosen by API key"]);
    expect(errorsOf({ rules, identity: { required: true } })).toEqual(['RATE_LIMITS.identity.required: needs "identity.header" to name the API-key header']);
    expect(errorsOf({ rules, keys: { ["b".repeat(64)]: "gold" } })).toEqual([`RATE_LIMITS.keys.${"b".repeat(64)}: "gold" is not a tier`]);
  });

  it("refuses a limit of more than 1000 per millisecond of its window, which requests recorded a microsecond apart cannot count, naming the field and why", () => {
    const why = "requests are recorded at least a microsecond apart, so a window holds no more";
    expect(errorsOf({ rules: [{ name: "burst", limit: 2000, window: "1ms" }] })).toEqual([
      `RATE_LIMITS.rules[0].limit: must be at most 1000 per millisecond of the window, 1000 in 1 ms, not 2000: ${why}`,
    ]);
    const tiered = {
      identity: { header: "x-api-key" },
      defaultTier: "free",
      tiers: {
        free: {
          rules: [
            { name: "m", limit: 5, window: "1s" },
            { name: "burst", limit: 500_000, window: 499 },
          ],
        },
      },
      addressRules: [{ name: "floor", limit: 1_000_000, window: "999ms" }],
    };
    expect(errorsOf(tiered)).toEqual([
      `RATE_LIMITS.tiers.free.rules[1].limit: must be at most 1000 per millisecond of the window, 499000 in 499 ms, not 500000: ${why}`,
      `RATE_LIMITS.addressRules[0].limit: must be at most 1000 per millisecond of the window, 999000 in 999 ms, not 1000000: ${why}`,
    ]);
    // up to the bound, whatever the unit
    for (const [limit, window] of [
      [1000, "1ms"],
      [1_000_000, "1s"],
      [499_000, 499],
    ] as const) {
      expect(parseRateLimits({ rules: [{ name: "burst", limit, window }] }).ok, `${limit} in ${window}`).toBe(true);
    }
  });

  it("never repeats a keys entry named by no SHA-256, which may be the raw API key, naming it by its place", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    const errors = errorsOf({ rules, keys: { ["b".repeat(64)]: "m", "sk-live-hunter2": "m" } });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^RATE_LIMITS\.keys: entry 2 is named by no SHA-256 of an API key/);
    expect(errors.join("\n")).not.toContain("hunter2");
  });

  it("never repeats a raw API key written where key hashes go, whatever else is wrong with the entry, nor a string given for a list of them or for the allow or deny table", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    const identity = { header: "x-api-key" };
    const cases: [unknown, RegExp][] = [
      // a key named by its raw value, with a tier of the wrong type as well
      [{ rules, identity, keys: { "sk-live-hunter2": 5 } }, /^RATE_LIMITS\.keys: entry 1 /],
      [{ rules, identity, keys: { "sk-live-hunter2": { tier: "m" } } }, /^RATE_LIMITS\.keys: entry 1 /],
      // one key where a table or a list of hashes goes
      [{ rules, identity, keys: "sk-live-hunter2" }, /^RATE_LIMITS\.keys: /],
      [{ rules, identity, allow: { keys: "sk-live-hunter2" } }, /^RATE_LIMITS\.allow\.keys: .*Array/],
      [{ rules, identity, deny: { keys: "sk-live-hunter2" } }, /^RATE_LIMITS\.deny\.keys: .*Array/],
      // one key where the whole allow or deny table goes (deny = "sk-…" in TOML)
      [{ rules, identity, allow: "sk-live-hunter2" }, /^RATE_LIMITS\.allow: must be an object, not a string/],
      [{ rules, identity, deny: "sk-live-hunter2" }, /^RATE_LIMITS\.deny: must be an object, not a string/],
    ];
    for (const [config, named] of cases) {
      const errors = errorsOf(config);
      expect(errors.length, JSON.stringify(config)).toBeGreaterThan(0);
      for (const error of errors) expect(error, JSON.stringify(config)).not.toContain("hunter2");
      expect(
        errors.some((e) => named.test(e)),
        `${JSON.stringify(config)}: ${errors.join("; ")}`,
      ).toBe(true);
    }
  });

  it("refuses what is not a configuration at all", () => {
    expect(errorsOf(undefined)).toEqual(["RATE_LIMITS: is not set"]);
    expect(errorsOf("{nope")[0]).toMatch(/^RATE_LIMITS: is not valid JSON/);
    expect(errorsOf(5)).toEqual(["RATE_LIMITS: must be an object, not 5"]);
    expect(errorsOf([])[0]).toMatch(/^RATE_LIMITS: must be an object/);
  });

  it("refuses a JSON string that names a field twice in one object, where JSON.parse would run with the last", () => {
    expect(errorsOf('{"rules":[{"name":"api","limit":10,"window":"1m","limit":10000}]}')).toEqual([
      'RATE_LIMITS.rules[0]: names the field "limit" twice, and only the last would count: write it once',
    ]);
    // the same text, each field once, is a configuration
    expect(parseRateLimits('{"rules":[{"name":"api","limit":10,"window":"1m"}]}').ok).toBe(true);
  });

  it("names a required field that is missing as missing, not as a wrong type", () => {
    expect(errorsOf({ rules: [{ limit: 5, window: "10s" }] })).toEqual(["RATE_LIMITS.rules[0].name: is required"]);
    expect(errorsOf({ rules: [{ name: "a", window: "10s" }] })).toEqual(["RATE_LIMITS.rules[0].limit: is required"]);
    expect(errorsOf({ rules: [{ name: "a", limit: 5 }] })).toEqual(["RATE_LIMITS.rules[0].window: is required"]);
    expect(errorsOf({ rules: [{ name: "a", limit: 5, window: "10s" }], cors: {} })).toEqual(["RATE_LIMITS.cors.origins: is required"]);
    expect(errorsOf({ tiers: { free: {} }, defaultTier: "free", identity: { header: "k" } })).toEqual(["RATE_LIMITS.tiers.free.rules: is required"]);
  });

  it("defaults the request-shaping fields: IPv6 per /64, denials cached 10 s at most, X-Forwarded-For, case-insensitive paths", () => {
    const r = parseRateLimits({ rules: [{ name: "m", limit: 1, window: "1s", path: "/v1/*" }] });
    expect(r.ok && r.config).toMatchObject({ ipv6Prefix: 64, denialCacheMaxAgeMs: 10_000, clientIpHeader: "x-forwarded-for", passForwardedHeaders: false });
    const path = r.ok ? r.config.tiers.get("default")![0]!.path! : undefined;
    expect(path?.test("/V1/Users")).toBe(true);
    expect(path?.test("/v1/u\u017Fers")).toBe(true); // "ſ" folds to "s", as Java's equalsIgnoreCase has it
    expect(path?.test("/v1/a\nb")).toBe(true); // a decoded newline is still "any run of characters"
    const exact = parseRateLimits({ caseSensitivePaths: true, rules: [{ name: "m", limit: 1, window: "1s", path: "/v1/*" }] });
    const exactPath = exact.ok ? exact.config.tiers.get("default")![0]!.path! : undefined;
    expect(exactPath?.test("/V1/Users")).toBe(false);
    expect(exactPath?.test("/v1/Users")).toBe(true);
  });

  it("accepts and normalises the request-shaping fields", () => {
    const r = parseRateLimits({
      ipv6Prefix: 48,
      denialCacheMaxAge: "30s",
      clientIpHeader: "X-Client-IP",
      passForwardedHeaders: true,
      rules: [{ name: "m", limit: 1, window: "1s", path: "//v1/%75sers" }],
    });
    expect(r.ok && r.config).toMatchObject({ ipv6Prefix: 48, denialCacheMaxAgeMs: 30_000, clientIpHeader: "x-client-ip", passForwardedHeaders: true });
    // the glob in the canonical form of the requests it is matched against
    expect(r.ok && r.config.tiers.get("default")![0]!.path!.test("/v1/users")).toBe(true);
  });

  it("refuses as the API-key header one that belongs to the connection, or where the gate writes the client address, naming the field and why", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    for (const header of ["Connection", "Keep-Alive", "Proxy-Connection", "TE", "Transfer-Encoding", "Upgrade"]) {
      expect(errorsOf({ rules, identity: { header } }), header).toEqual([
        expect.stringMatching(
          new RegExp(
            `^RATE_LIMITS\\.identity\\.header: "${header}" belongs to the connection, not the request .*the gate never forwards it to the origin.*name a header that carries the key alone`,
          ),
        ),
      ]);
    }
    // X-Forwarded-For by default: the gate replaces the client's value with the address
    expect(errorsOf({ rules, identity: { header: "X-Forwarded-For" } })).toEqual([
      expect.stringMatching(/^RATE_LIMITS\.identity\.header: "X-Forwarded-For" is where the gate writes the client address for the origin \(clientIpHeader, by default\)/),
    ]);
    expect(errorsOf({ rules, identity: { header: "X_Forwarded_For" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: /);
    // PHP reads `.` in a header's name as `_` too (behind Caddy's FastCGI or FrankenPHP)
    expect(errorsOf({ rules, identity: { header: "X.Forwarded.For" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: /);
    // with the address in a header of its own, X-Forwarded-For is one more dropped forwarding header (check-config warns)
    expect(parseRateLimits({ rules, identity: { header: "X-Forwarded-For" }, clientIpHeader: "x-client-address" }).ok).toBe(true);
    // another spelling is another header to the gate and the runtime, and goes on to the origin
    expect(parseRateLimits({ rules, identity: { header: "Keep_Alive" } }).ok).toBe(true);
    // headers the gate withholds from the origin but could be a credential for the gate alone: accepted (check-config warns)
    for (const header of ["Proxy-Authorization", "Trailer", "Expect", "X-Real-IP", "X-Original-URL"])
      expect(parseRateLimits({ rules, identity: { header } }).ok, header).toBe(true);
  });

  it("names the field for each bad request-shaping value", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    expect(errorsOf({ rules, ipv6Prefix: 47 })).toEqual(["RATE_LIMITS.ipv6Prefix: must be at least 48"]);
    expect(errorsOf({ rules, ipv6Prefix: 129 })).toEqual(["RATE_LIMITS.ipv6Prefix: must be at most 128"]);
    expect(errorsOf({ rules, ipv6Prefix: 56.5 })).toEqual(["RATE_LIMITS.ipv6Prefix: must be a whole number"]);
    expect(errorsOf({ rules, denialCacheMaxAge: "2h" })).toEqual(["RATE_LIMITS.denialCacheMaxAge: must be at most 1h"]);
    expect(errorsOf({ rules, denialCacheMaxAge: 0 })[0]).toMatch(/^RATE_LIMITS\.denialCacheMaxAge: must be/);
    expect(errorsOf({ rules, clientIpHeader: "client ip" })).toEqual(["RATE_LIMITS.clientIpHeader: must be an HTTP header name"]);
    expect(errorsOf({ rules, clientIpHeader: "Host" })[0]).toMatch(/^RATE_LIMITS\.clientIpHeader: "Host" carries something else/);
    expect(errorsOf({ rules, identity: { header: "X-API-Key" }, clientIpHeader: "x-api-key" })[0]).toMatch(/^RATE_LIMITS\.clientIpHeader: /);
    // the same headers to a CGI-style origin, spelled with _ for -
    expect(errorsOf({ rules, identity: { header: "X-API-Key" }, clientIpHeader: "X_API_Key" })[0]).toMatch(/^RATE_LIMITS\.clientIpHeader: /);
    expect(errorsOf({ rules, clientIpHeader: "CF_Connecting_IP" })[0]).toMatch(/^RATE_LIMITS\.clientIpHeader: /);
    // and with `.` for `-`, as PHP reads them
    expect(errorsOf({ rules, identity: { header: "X-API-Key" }, clientIpHeader: "X.API.Key" })[0]).toMatch(/^RATE_LIMITS\.clientIpHeader: /);
    expect(errorsOf({ rules, identity: { header: "CF.Connecting.IP" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: /);
    // a Cookie header holds every cookie of the request: one more beside the key would be a new identity
    expect(errorsOf({ rules, identity: { header: "Cookie" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: "Cookie" holds every cookie/);
    expect(errorsOf({ rules, identity: { header: "cookie" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: /);
    // the client's address as a key: every IPv6 address of one customer a caller of its own
    expect(errorsOf({ rules, identity: { header: "CF-Connecting-IP" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: "CF-Connecting-IP" is the client's address/);
    expect(errorsOf({ rules, identity: { header: "cf_connecting_ip" } })[0]).toMatch(/^RATE_LIMITS\.identity\.header: /);
    for (const header of ["CF-Connecting-IPv6", "True-Client-IP", "CF-Pseudo-IPv4"]) {
      expect(errorsOf({ rules, identity: { header } })[0], header).toMatch(new RegExp(`^RATE_LIMITS\\.identity\\.header: "${header}" is the client's address`));
    }
    expect(errorsOf({ rules, passForwardedHeaders: "yes" })[0]).toMatch(/^RATE_LIMITS\.passForwardedHeaders: /);
    expect(errorsOf({ rules, caseSensitivePaths: 1 })[0]).toMatch(/^RATE_LIMITS\.caseSensitivePaths: /);
    expect(errorsOf({ rules: [{ name: "m", limit: 1, window: "1s", path: "/files/a%2Fb" }] })).toEqual([
      "RATE_LIMITS.rules[0].path: contains an encoded slash (%2F), which the gate refuses in every request",
    ]);
  });

  it("names a value nested past any field as the error, rather than overflowing the stack on it", () => {
    const deep = `{"rules":[{"name":"m","limit":1,"window":"1s"}],"note":${"[".repeat(100_000)}${"]".repeat(100_000)}}`;
    expect(parseRateLimits(deep)).toEqual({ ok: false, errors: [expect.stringMatching(/^RATE_LIMITS\.note(\[0\]){31}: nests deeper than 32 levels/)] });
  });

  it("refuses names every JavaScript object already has, wherever a name is looked up", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    const identity = { header: "x-api-key" };
    const reserved = /"(toString|constructor|__proto__|valueOf|hasOwnProperty)" is a name every JavaScript object already has/;
    for (const name of ["toString", "constructor", "valueOf", "hasOwnProperty"]) {
      const errors = errorsOf({ identity, defaultTier: "free", tiers: { free: { rules }, [name]: { rules } } });
      expect(errors, name).toEqual([`RATE_LIMITS.tiers.${name}: "${name}" is a name every JavaScript object already has; choose another`]);
    }
    // JSON.parse keeps "__proto__" as a key of its own; the schema alone would drop it without a word
    expect(errorsOf(`{"identity":{"header":"k"},"defaultTier":"__proto__","tiers":{"__proto__":{"rules":[{"name":"m","limit":1,"window":"1s"}]}}}`)[0]).toMatch(
      /^RATE_LIMITS\.tiers\.__proto__: /,
    );
    expect(errorsOf({ identity, defaultTier: "toString", tiers: { free: { rules } } })[0]).toMatch(reserved);
    expect(errorsOf({ identity, defaultTier: "free", tiers: { free: { rules } }, keys: { ["c".repeat(64)]: "constructor" } })[0]).toMatch(reserved);
    expect(errorsOf({ rules: [{ name: "valueOf", limit: 1, window: "1s" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.name: "valueOf" is a name/);
    expect(errorsOf({ prefix: "__proto__", rules })[0]).toMatch(/^RATE_LIMITS\.prefix: /);
  });
});

describe("sharedLogs", () => {
  const logsOf = (rules: unknown[], list: "rules" | "addressRules" = "rules") => {
    const r = parseRateLimits(list === "rules" ? { rules } : { rules: [{ name: "any", limit: 1, window: "1s" }], addressRules: rules });
    if (!r.ok) throw new Error(r.errors.join("; "));
    return (list === "rules" ? r.config.tiers.get("default")! : r.config.addressRules).map((x) => `${x.name}→${x.log}`);
  };

  it("puts enforced rules with the same methods, path and cost in the log of the one with the longest window", () => {
    expect(
      logsOf([
        { name: "second", limit: 5, window: "1s" },
        { name: "hour", limit: 500, window: "1h" },
        { name: "minute", limit: 50, window: "1m" },
        { name: "postsA", limit: 5, window: "1m", methods: ["post", "PUT"], path: "/v1/*" },
        { name: "postsB", limit: 50, window: "1h", methods: ["PUT", "POST"], path: "/v1/*" },
      ]),
    ).toEqual(["second→hour", "hour→hour", "minute→hour", "postsA→postsB", "postsB→postsB"]);
  });

  it("keeps a log of its own for a rule that sees other requests, weighs them otherwise, or only shadows", () => {
    expect(
      logsOf([
        { name: "all", limit: 5, window: "1s" },
        { name: "gets", limit: 50, window: "1h", methods: ["GET"] },
        { name: "v1", limit: 50, window: "1h", path: "/v1/*" },
        { name: "heavy", limit: 50, window: "1h", cost: 2 },
        { name: "trial", limit: 50, window: "1h", shadow: true },
      ]),
    ).toEqual(["all→all", "gets→gets", "v1→v1", "heavy→heavy", "trial→trial"]);
  });

  it("names the first by name of equally long rules, in any order, and groups address rules among themselves", () => {
    expect(
      logsOf([
        { name: "b", limit: 9, window: "60s" },
        { name: "a", limit: 5, window: "1m" },
      ]),
    ).toEqual(["b→a", "a→a"]);
    expect(
      logsOf([
        { name: "a", limit: 5, window: "1m" },
        { name: "b", limit: 9, window: "60s" },
      ]),
    ).toEqual(["a→a", "b→a"]);
    expect(
      logsOf(
        [
          { name: "burst", limit: 5, window: "1s" },
          { name: "day", limit: 900, window: "1d" },
        ],
        "addressRules",
      ),
    ).toEqual(["burst→day", "day→day"]);
  });
});

describe("cors (CORS headers on the gate's own answers)", () => {
  const rules = [{ name: "m", limit: 1, window: "1s" }];
  const corsOf = (cors: unknown) => {
    const r = parseRateLimits({ rules, cors });
    if (!r.ok) throw new Error(r.errors.join("; "));
    return r.config.cors;
  };

  it("is off unless configured", () => {
    const r = parseRateLimits({ rules });
    expect(r.ok && r.config.cors).toBeUndefined();
  });

  it("keeps each origin as browsers serialise it, the case of its scheme and host normalised, credentials off by default", () => {
    expect(corsOf({ origins: ["https://app.example.com", "HTTPS://Admin.Example.COM", "http://127.0.0.1:8080", "http://[::1]:3000"] })).toEqual({
      origins: new Set(["https://app.example.com", "https://admin.example.com", "http://127.0.0.1:8080", "http://[::1]:3000"]),
      credentials: false,
    });
    expect(corsOf({ origins: ["https://app.example.com"], credentials: true })?.credentials).toBe(true);
    expect(corsOf({ origins: ["*"] })).toEqual({ origins: "*", credentials: false });
  });

  it("refuses what is no origin as a browser sends it, naming the entry and what to write", () => {
    const at = (origin: string) => errorsOf({ rules, cors: { origins: ["https://ok.example", origin] } });
    for (const [entry, write] of [
      ["https://app.example.com/", "https://app.example.com"],
      ["https://app.example.com/v1", "https://app.example.com"],
      ["https://app.example.com?x", "https://app.example.com"],
      ["https://app.example.com:443", "https://app.example.com"],
      ["https://user:secret@app.example.com", "https://app.example.com"],
      ["https://bücher.example", "https://xn--bcher-kva.example"],
    ]) {
      const errors = at(entry!);
      expect(errors, entry).toEqual([
        expect.stringMatching(/^RATE_LIMITS\.cors\.origins\[1\]: must be an origin as browsers send it, scheme:\/\/host\[:port\] \(no path, no wildcard\)/),
      ]);
      expect(errors[0], entry).toContain(`write "${write}"`);
      // the entry itself is not repeated: it may hold credentials
      expect(errors[0], entry).not.toContain("secret");
    }
    for (const entry of ["app.example.com", "*.example.com", "https://*.example.com", "ftp://files.example.com", "", " https://app.example.com"]) {
      expect(at(entry), entry).toEqual([expect.stringMatching(/^RATE_LIMITS\.cors\.origins\[1\]: must be an origin as browsers send it/)]);
    }
    expect(at("null")).toEqual([expect.stringMatching(/^RATE_LIMITS\.cors\.origins\[1\]: "null" is sent by sandboxed frames and local files of every site: never allowed/)]);
  });

  it('refuses "*" beside other origins or with credentials, an empty list and unknown fields, naming the field', () => {
    expect(errorsOf({ rules, cors: { origins: ["*", "https://app.example.com"] } })).toEqual([expect.stringMatching(/^RATE_LIMITS\.cors\.origins: "\*" stands alone/)]);
    expect(errorsOf({ rules, cors: { origins: ["*"], credentials: true } })).toEqual([
      expect.stringMatching(/^RATE_LIMITS\.cors\.credentials: cannot be true with "\*": every site could read the gate's answers/),
    ]);
    expect(errorsOf({ rules, cors: { origins: [] } })).toEqual([expect.stringMatching(/^RATE_LIMITS\.cors\.origins: needs at least one origin/)]);
    expect(errorsOf({ rules, cors: {} })[0]).toMatch(/^RATE_LIMITS\.cors\.origins: /);
    expect(errorsOf({ rules, cors: { origins: ["https://app.example.com"], credentials: "yes" } })[0]).toMatch(/^RATE_LIMITS\.cors\.credentials: /);
    expect(errorsOf({ rules, cors: { origins: ["https://app.example.com"], methods: ["GET"] } })[0]).toMatch(
      /^RATE_LIMITS\.cors\.methods: unknown field \(allowed: origins, credentials\)/,
    );
    expect(errorsOf({ rules, cors: true })[0]).toMatch(/^RATE_LIMITS\.cors: must be an object/);
  });
});
