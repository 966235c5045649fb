import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { freePort } from "../../scripts/lib/ports.ts";
import { services } from "../helpers/shim.ts";

// a timeout: a command that should refuse to start but serves instead (a shim past its checks)
// would otherwise hold the run until CI kills it, and fail it as a hang, not as this test
const run = (script: string, args: string[], input?: string, env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [script, ...args], { input, encoding: "utf8", env: { ...process.env, ...env }, timeout: 60_000 });

// each CLI run is a whole npm process, spawned synchronously: on a loaded 2-core machine a
// test of several takes minutes, so the timeout only catches a hang
describe("npm run check-config", { timeout: 240_000 }, () => {
  it("accepts wrangler.toml's RATE_LIMITS and lists the limits", () => {
    const r = run("scripts/check-config.ts", []);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("✓ wrangler.toml [vars] RATE_LIMITS is valid");
    expect(r.stdout).toContain("default: 5 per 10s per client IP");
  });

  it("reads a wrangler configuration named as a file as it reads wrangler.toml, not as JSON", () => {
    const dir = mkdtempSync(join(tmpdir(), "check-config-"));
    const file = join(dir, "wrangler.staging.toml");
    writeFileSync(file, '[vars]\nRATE_LIMITS = { rules = [{ name = "minute", limit = 0, window = "1m" }] }\n');
    const bad = run("scripts/check-config.ts", [file]);
    expect([bad.status, bad.stderr]).toEqual([
      1,
      expect.stringMatching(/wrangler\.staging\.toml \[vars\] RATE_LIMITS is invalid:\n {2}- RATE_LIMITS\.rules\[0\]\.limit: must be at least 1/),
    ]);
    const given = run("scripts/check-config.ts", ["wrangler.toml"]);
    expect([given.status, given.stdout]).toEqual([0, expect.stringContaining("default: 5 per 10s per client IP")]);
  });

  it("checks a wrangler configuration's ORIGIN_URL as the gate does, naming it without echoing it and saying to give the scheme", () => {
    const dir = mkdtempSync(join(tmpdir(), "check-config-"));
    const limits = 'RATE_LIMITS = { rules = [{ name = "minute", limit = 100, window = "1m" }] }\n';
    const check = (origin: string) => {
      const file = join(dir, "wrangler.toml");
      writeFileSync(file, `[vars]\nORIGIN_URL = ${JSON.stringify(origin)}\n${limits}`);
      return run("scripts/check-config.ts", [file]);
    };
    const bare = check("api.internal.example:8443");
    expect(bare.status).toBe(1);
    expect(bare.stderr).toMatch(/ORIGIN_URL: .*https:\/\/api\.example\.com/);
    expect(bare.stderr + bare.stdout).not.toContain("api.internal.example");
    const query = check("https://origin.example/v1?debug=1");
    expect([query.status, query.stderr]).toEqual([1, expect.stringContaining("ORIGIN_URL: must hold no query or fragment")]);
    for (const good of ["", "https://origin.example/v1"]) expect(check(good).status, good).toBe(0);
  });

  it("refuses an ORIGIN_URL that holds a user name or password, which the runtime drops without sending, and repeats neither", () => {
    const dir = mkdtempSync(join(tmpdir(), "check-config-"));
    const file = join(dir, "wrangler.toml");
    for (const origin of ["https://ouser:opass-hunter2@origin.example/v1", "https://ouser@origin.example"]) {
      writeFileSync(file, `[vars]\nORIGIN_URL = ${JSON.stringify(origin)}\nRATE_LIMITS = { rules = [{ name = "minute", limit = 100, window = "1m" }] }\n`);
      const r = run("scripts/check-config.ts", [file]);
      expect([r.status, r.stderr], origin).toEqual([1, expect.stringContaining("ORIGIN_URL: must hold no user name or password")]);
      expect(r.stderr + r.stdout).not.toMatch(/ouser|opass-hunter2/);
    }
  });

  it("reads a file named relative to the directory npm run was typed in, not the package's root where npm runs it", () => {
    const dir = mkdtempSync(join(tmpdir(), "check-config-"));
    writeFileSync(join(dir, "limits.json"), JSON.stringify({ rules: [{ name: "minute", limit: 100, window: "60s" }] }));
    const r = spawnSync("bash", ["-c", `cd ${dir} && npm --prefix ${process.cwd()} run --silent check-config -- limits.json`], { encoding: "utf8", timeout: 60_000 });
    expect([r.status, r.stdout]).toEqual([0, expect.stringContaining("minute: 100 per 1m")]);
  });

  it("reads a JSON file or standard input and names every bad field", () => {
    const dir = mkdtempSync(join(tmpdir(), "check-config-"));
    const file = join(dir, "limits.json");
    writeFileSync(file, JSON.stringify({ identity: { header: "x-api-key" }, rules: [{ name: "minute", limit: 100, window: "60s" }] }));
    const good = run("scripts/check-config.ts", [file]);
    expect(good.status).toBe(0);
    expect(good.stdout).toContain("minute: 100 per 1m per x-api-key, else per client IP");
    // a key header with made-up keys let through at the default tier, and no address floor: said, not refused
    expect(good.stdout).toMatch(/⚠ identity\.unknownKeys is "defaultTier" and no addressRules rule covers every request .*: a client that sends a new made-up API key/);
    const withFloor = (addressRules: unknown[]) => {
      writeFileSync(file, JSON.stringify({ identity: { header: "x-api-key" }, rules: [{ name: "minute", limit: 100, window: "60s" }], addressRules }));
      return run("scripts/check-config.ts", [file]).stdout;
    };
    expect(withFloor([{ name: "floor", limit: 1000, window: "60s" }])).not.toContain("⚠");
    // what the gate will do, all of it: address rules, shadow rules, path globs as written, the lists
    writeFileSync(
      file,
      JSON.stringify({
        identity: { header: "x-api-key" },
        rules: [
          { name: "minute", limit: 100, window: "60s", path: "/v1/*", methods: ["GET"] },
          { name: "trial", limit: 5, window: "60s", shadow: true },
        ],
        addressRules: [{ name: "floor", limit: 1000, window: "60s" }],
        deny: { ips: ["192.0.2.0/24"] },
        cors: { origins: ["https://app.example.com", "http://localhost:5173"] },
      }),
    );
    const described = run("scripts/check-config.ts", [file]).stdout;
    expect(described).toContain("CORS on the gate's own answers (429, 401, 403, 503, …) for https://app.example.com, http://localhost:5173\n");
    expect(described).toContain("minute: 100 per 1m per x-api-key, else per client IP on GET /v1/*");
    expect(described).toMatch(/trial: 5 per 1m .*\(shadow: reported, never enforced/);
    expect(described).toContain("address/floor: 1000 per 1m per client address, whatever its key");
    expect(described).toContain("deny list: 1 IP entry");
    // a glob that every path matches is a floor too
    expect(withFloor([{ name: "floor", limit: 1000, window: "60s", path: "/*" }])).not.toContain("⚠");
    expect(withFloor([{ name: "floor", limit: 1000, window: "60s", path: "/**" }])).not.toContain("⚠");
    expect(withFloor([{ name: "floor", limit: 1000, window: "60s", path: "/v1/*" }])).toContain("⚠");
    // rules that are no floor: shadow, or only for some paths or methods
    expect(withFloor([{ name: "floor", limit: 1000, window: "60s", shadow: true }])).toContain("⚠");
    expect(withFloor([{ name: "login", limit: 5, window: "60s", path: "/login", methods: ["POST"] }])).toContain("⚠");
    writeFileSync(file, JSON.stringify({ identity: { header: "x-api-key" }, rules: [{ name: "minute", limit: 100, window: "60s" }] }));
    const bad = run("scripts/check-config.ts", ["-"], '{"rules":[{"name":"m","limit":-1,"window":"1y"}]}');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain("RATE_LIMITS.rules[0].limit: must be at least 1");
    expect(bad.stderr).toContain("RATE_LIMITS.rules[0].window: must be a duration");
    const missing = run("scripts/check-config.ts", [join(dir, "nope.json")]);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/cannot read .*nope\.json/);
  });

  it("lists originTimeout as a time limit on the origin's response head, warns of one under a second, and names the field it refuses", () => {
    const rules = [{ name: "minute", limit: 100, window: "60s" }];
    const check = (config: Record<string, unknown>) => run("scripts/check-config.ts", ["-"], JSON.stringify({ rules, ...config }));
    const set = check({ originTimeout: "30s" });
    expect([set.status, set.stdout]).toEqual([0, expect.stringContaining("origin time limit: 30s for the origin's response head (then 504 origin-timeout); none for its body\n")]);
    expect(set.stdout).not.toContain("⚠");
    expect(check({}).stdout).not.toContain("origin time limit");
    // 30 alone is 30 ms, where a number of seconds was likely meant
    const short = check({ originTimeout: 30 });
    expect([short.status, short.stdout]).toEqual([0, expect.stringMatching(/origin time limit: 30ms .*\n⚠ originTimeout is 30 ms: .*write "30s"/s)]);
    const bad = check({ originTimeout: "30 sec" });
    expect([bad.status, bad.stderr]).toEqual([
      1,
      expect.stringContaining('RATE_LIMITS.originTimeout: must be a duration like "10s", "1m", "500ms" or a number of milliseconds; did you mean "30s"?'),
    ]);
  });

  it("warns about an IPv6 deny entry narrower than the network the gate counts as one caller, naming it and the network to write, and still exits 0", () => {
    const rules = [{ name: "minute", limit: 100, window: "60s" }];
    const check = (config: Record<string, unknown>) => run("scripts/check-config.ts", ["-"], JSON.stringify({ rules, ...config }));
    const ips = ["198.51.100.7", "2001:db8:1:2::7", "2001:db8:1:2:8000::/80", "2001:db8:3::/64", "2001:db8:4::/48", "::ffff:192.0.2.1"];
    const byDefault = check({ deny: { ips } });
    expect(byDefault.status).toBe(0);
    expect(byDefault.stdout).toContain("✓ standard input is valid");
    const warnings = byDefault.stdout.split("\n").filter((line) => line.startsWith("⚠"));
    expect(warnings).toEqual([
      expect.stringMatching(
        /^⚠ deny\.ips\[1\] \("2001:db8:1:2::7"\) covers part of the \/64 the gate counts as one caller \(ipv6Prefix 64\): .*another address .*Write "2001:db8:1:2::\/64"/,
      ),
      expect.stringMatching(/^⚠ deny\.ips\[2\] \("2001:db8:1:2:8000::\/80"\) covers part of the \/64 .*Write "2001:db8:1:2::\/64"/),
    ]);
    // a shorter prefix counts a larger network as one caller: the entry to write is that network
    expect(check({ deny: { ips }, ipv6Prefix: 48 }).stdout).toMatch(
      /⚠ deny\.ips\[3\] \("2001:db8:3::\/64"\) covers part of the \/48 .*\(ipv6Prefix 48\).*Write "2001:db8:3::\/48"/,
    );
    // a longer prefix counts less, but a caller still holds a whole /64 to move in
    const perAddress = check({ deny: { ips }, ipv6Prefix: 128 }).stdout;
    expect(perAddress).toMatch(/⚠ deny\.ips\[1\] \("2001:db8:1:2::7"\) covers part of a \/64, the least one IPv6 customer holds: .*Write "2001:db8:1:2::\/64"/);
    expect(perAddress).not.toContain("deny.ips[3]");
    // an allow entry admits no one it does not name: nothing to walk around
    expect(check({ allow: { ips } }).stdout).not.toContain("⚠");
  });

  it("advises on a deny entry of a transition range by the caller the gate counts there: a 6to4 site, a Teredo client, a NAT64 address", () => {
    const rules = [{ name: "minute", limit: 100, window: "60s" }];
    const check = (config: Record<string, unknown>) => run("scripts/check-config.ts", ["-"], JSON.stringify({ rules, ...config }));
    // 6to4: the caller is the whole /48 site of 192.0.2.7; Teredo: RFC 4380's client 192.0.2.45,
    // whatever its server and port; NAT64: one translated IPv4 client per address
    const ips = ["2002:c000:207:1::/64", "2002:c000:207::/48", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32", "64:ff9b::c000:221", "64:ff9b::c000:200/120"];
    for (const ipv6Prefix of [48, 64]) {
      const result = check({ deny: { ips }, ipv6Prefix });
      expect(result.status).toBe(0);
      const warnings = result.stdout.split("\n").filter((line) => line.startsWith("⚠"));
      // The 6to4 host holds 192.0.2.7 itself (6to4 needs it), and a Teredo client its address
      // behind the NAT: denied by its site or its tunnel alone, it comes by IPv4 and is not; an
      // IPv4 entry covers all of them (its 6to4 site, its Teredo and NAT64 addresses)
      expect(warnings, String(ipv6Prefix)).toEqual([
        expect.stringMatching(/^⚠ deny\.ips\[0\] \("2002:c000:207:1::\/64"\) covers part of 2002:c000:207::\/48, the 6to4 site of 192\.0\.2\.7.*Write "192\.0\.2\.7"/),
        expect.stringMatching(/^⚠ deny\.ips\[1\] \("2002:c000:207::\/48"\) covers the 6to4 site of 192\.0\.2\.7.*by IPv4.*Write "192\.0\.2\.7"/),
        expect.stringMatching(/^⚠ deny\.ips\[2\] \("2001:0:4136:e378:8000:63bf:3fff:fdd2"\) covers part of a Teredo client.*192\.0\.2\.45.*Write "192\.0\.2\.45"/),
      ]);
      // never the advice to deny a site's /48 alone, which leaves its IPv4 host free
      expect(result.stdout).not.toMatch(/Write "2002:c000:207::\/48"/);
      // never the advice to deny every client of a Teredo server, or every translated IPv4 client
      expect(result.stdout).not.toMatch(/Write "2001:0:4136:e378::\/(48|64)"|Write "64:ff9b::\/(48|64)"/);
    }
  });

  it("warns when ipv6Prefix is longer than 64, saying how many callers one /64 then makes, and still exits 0", () => {
    const rules = [{ name: "minute", limit: 100, window: "60s" }];
    const warnings = (ipv6Prefix: number) => {
      const r = run("scripts/check-config.ts", ["-"], JSON.stringify({ rules, ipv6Prefix }));
      expect(r.status).toBe(0);
      return r.stdout.split("\n").filter((line) => line.startsWith("⚠"));
    };
    // one customer holds a whole /64: every address of it past the prefix is a caller of its own, with the quota afresh
    expect(warnings(128)).toEqual([expect.stringMatching(/^⚠ ipv6Prefix \(128\) .*a whole \/64 .*2\^64 .*"ipv6Prefix": 64/)]);
    expect(warnings(80)).toEqual([expect.stringMatching(/^⚠ ipv6Prefix \(80\) .*2\^16 /)]);
    expect(warnings(64)).toEqual([]);
    expect(warnings(48)).toEqual([]);
  });

  it("warns when allow or deny lists API keys but no identity.header says where to read one (the entries match no request), and still exits 0", () => {
    const rules = [{ name: "minute", limit: 100, window: "60s" }];
    const [hash, other] = ["a".repeat(64), "b".repeat(64)];
    const warned = (more: Record<string, unknown>) => {
      const r = run("scripts/check-config.ts", ["-"], JSON.stringify({ rules, ...more }));
      expect(r.status).toBe(0);
      return r.stdout.split("\n").filter((line) => line.startsWith("⚠"));
    };
    expect(warned({ allow: { keys: [hash], ips: ["192.0.2.0/24"] } })).toEqual([
      expect.stringMatching(
        /^⚠ allow\.keys lists 1 API key, but no identity\.header is configured: .*matches no request.*Set identity\.header .*or list their addresses in allow\.ips\.$/,
      ),
    ]);
    expect(warned({ deny: { keys: [hash, other] } })).toEqual([expect.stringMatching(/^⚠ deny\.keys lists 2 API keys, but no identity\.header .*no one is denied by key/)]);
    // with the header the gate reads the key (unknownKeys "reject" silences the made-up-keys warning)
    expect(warned({ identity: { header: "x-api-key", unknownKeys: "reject" }, allow: { keys: [hash] }, deny: { keys: [other] } })).toEqual([]);
    expect(warned({ allow: { ips: ["192.0.2.0/24"] }, deny: { keys: [] } })).toEqual([]);
  });

  it("warns when the API-key header is one the gate never forwards to the origin, naming the field, why, and what made-up keys then get, and still exits 0", () => {
    const rules = [{ name: "minute", limit: 100, window: "60s" }];
    // a floor and "reject" silence the made-up-keys warning: only the header's is left
    const check = (header: string, more: Record<string, unknown> = {}) =>
      run("scripts/check-config.ts", ["-"], JSON.stringify({ rules, identity: { header, unknownKeys: "reject" }, ...more }));
    const warned = (header: string, more: Record<string, unknown> = {}) => {
      const r = check(header, more);
      expect(r.status, header).toBe(0);
      return r.stdout.split("\n").filter((line) => line.startsWith("⚠"));
    };
    // named as the gate reads it, in lower case
    const never = (header: string) => new RegExp(`^⚠ identity\\.header \\("${header.toLowerCase()}"\\) never reaches the origin: the gate drops `);
    expect(warned("Proxy-Authorization")).toEqual([expect.stringMatching(never("Proxy-Authorization"))]);
    expect(warned("Proxy-Authorization")[0]).toMatch(/as a hop-by-hop header.*a credential meant for the gate alone.*like "x-api-key"/);
    expect(warned("Trailer")).toEqual([expect.stringMatching(never("Trailer"))]);
    expect(warned("Expect")).toEqual([expect.stringMatching(never("Expect"))]);
    expect(warned("X-Original-URL")[0]).toMatch(/the headers origins route by .*whatever passForwardedHeaders says/);
    expect(warned("X-Real-IP")[0]).toMatch(/forwarding headers clients send unless passForwardedHeaders is true/);
    expect(warned("X_Real_IP")).toHaveLength(1);
    // passed on when the operator passes forwarding headers: the origin gets the key
    expect(warned("X-Real-IP", { passForwardedHeaders: true })).toEqual([]);
    // made-up keys let through as the default tier: the origin serves them as anonymous
    const open = check("Proxy-Authorization", { identity: { header: "Proxy-Authorization" }, addressRules: [{ name: "floor", limit: 1000, window: "60s" }] }).stdout;
    expect(open).toMatch(/With identity\.unknownKeys "defaultTier", a made-up key gets the default tier's quota for a request the origin serves as anonymous/);
    for (const header of ["x-api-key", "Authorization", "X_API_Key"]) expect(warned(header), header).toEqual([]);
  });
});

describe("npm run shim", { timeout: 240_000 }, () => {
  it("answers --help with its variables and starts nothing, and refuses an argument instead of ignoring it, even with SHIM_TOKEN set", () => {
    // with a token, a shim that reads no arguments starts serving: the timeout of run() then fails it
    const env = { SHIM_TOKEN: "t", REDIS_URL: services().redisUrl, SHIM_PORT: "0" };
    for (const flag of ["--help", "-h"]) {
      const help = run("scripts/shim/main.ts", [flag], undefined, env);
      expect(help.status, flag).toBe(0);
      expect(help.stdout).toMatch(/^Usage: slidegate-shim\n/);
      for (const name of ["SHIM_TOKEN", "SHIM_PREVIOUS_TOKEN", "REDIS_URL", "REDIS_CLUSTER_NODES", "SHIM_HOST", "SHIM_PORT", "SHIM_TLS_CERT", "SHIM_MAX_CONNECTIONS"]) {
        expect(help.stdout).toContain(name);
      }
      expect(help.stdout).not.toContain("listening");
    }
    // `--port 9000` would have been ignored, the shim listening on 8079 all the same
    const wrong = run("scripts/shim/main.ts", ["--port", "9000"], undefined, env);
    expect(wrong.status).toBe(2);
    expect(wrong.stdout).toBe("");
    expect(wrong.stderr).toMatch(/^slidegate shim: takes no arguments \(not "--port"\): it reads environment variables, such as SHIM_PORT; --help lists them/);
  });

  it("refuses to start without SHIM_TOKEN, saying why", () => {
    const r = run("scripts/shim/main.ts", [], undefined, { SHIM_TOKEN: "" });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/SHIM_TOKEN is not set/);
  });

  it("refuses to start on a Node without JSON.rawJSON (before 22), saying which it needs, instead of failing every reply after running its command", () => {
    // Node 22 without the V8 feature stands in for Node 20, which the installed package runs on
    const r = spawnSync(process.execPath, ["--no-harmony-json-parse-with-source", "scripts/shim/main.ts"], {
      encoding: "utf8",
      env: { ...process.env, SHIM_TOKEN: "t", REDIS_URL: services().redisUrl, SHIM_PORT: "0" },
      // a shim that starts anyway serves until killed
      timeout: 10_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^slidegate shim: needs Node\.js 22\.12 or later \(JSON\.rawJSON\), not v\d+/);
  });

  it("refuses a half-given TLS setup, an unreadable certificate and a zero cap, naming the variable", () => {
    const cases: [Record<string, string>, RegExp][] = [
      [{ SHIM_TLS_CERT: "cert.pem" }, /HTTPS needs both SHIM_TLS_CERT and SHIM_TLS_KEY \(PEM files\); only SHIM_TLS_CERT is set/],
      [{ SHIM_TLS_KEY: "key.pem" }, /only SHIM_TLS_KEY is set/],
      [{ SHIM_TLS_CERT: "/nonexistent/cert.pem", SHIM_TLS_KEY: "/nonexistent/key.pem" }, /SHIM_TLS_CERT: cannot read "\/nonexistent\/cert.pem"/],
      [{ SHIM_MAX_STREAMS: "0" }, /SHIM_MAX_STREAMS must be at least 1, not 0/],
      [{ SHIM_MAX_CONNECTIONS: "0" }, /SHIM_MAX_CONNECTIONS must be at least 1, not 0/],
      // every request has a body, so a limit of 0 answers every one 413
      [{ SHIM_BODY_LIMIT: "0" }, /SHIM_BODY_LIMIT must be at least 1, not 0/],
      [{ SHIM_MAX_TRANSACTIONS: "many" }, /SHIM_MAX_TRANSACTIONS must be a whole number, not "many"/],
    ];
    for (const [env, message] of cases) {
      const r = run("scripts/shim/main.ts", [], undefined, { SHIM_TOKEN: "t", REDIS_URL: services().redisUrl, SHIM_PORT: "1", ...env });
      expect(r.status, JSON.stringify(env)).toBe(1);
      expect(r.stderr).toMatch(message);
    }
  });

  it("prints exactly one ready line without the Redis password, serves, and stops on SIGTERM", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, ["scripts/shim/main.ts"], {
      env: { ...process.env, SHIM_TOKEN: "cli-token", SHIM_PORT: String(port), REDIS_URL: services().redisUrl },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (c: Buffer) => {
        out += c.toString();
        if (out.includes("\n")) resolve();
      });
      child.once("exit", (code) => reject(new Error(`exited ${code}`)));
    });
    expect(out).toBe(`slidegate shim listening on http://127.0.0.1:${port} -> ${services().redisUrl}\n`);
    const res = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: '["PING"]', headers: { authorization: "Bearer cli-token" } });
    expect(await res.json()).toEqual({ result: "PONG" });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  });
});
