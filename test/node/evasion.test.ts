import { createHash } from "node:crypto";
import { connect } from "node:net";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { type Echo, frameworkGates, rawRequest, startHonoWorkerOrigin } from "../helpers/framework-origin.ts";
import { services } from "../helpers/shim.ts";

// No way around a rule: the built Worker in workerd, the real shim and Redis, and an origin
// that routes like a lenient framework (test/helpers/framework-origin.ts). The origin is also
// the oracle: whatever it would route to a handler must count against that handler's rules.

const { gate, origin } = frameworkGates();

// every test gets identities of its own: 100.64.0.0/10 (shared address space) and 2001:db8::/32
let next = 0;
const freshIpv4 = () => {
  const n = ++next;
  return `100.${64 + ((n >> 16) & 63)}.${(n >> 8) & 255}.${n & 255}`;
};
const freshPrefix = () => `2001:db8:${(++next).toString(16)}`;

type Sent = { method?: string; headers?: [string, string][]; body?: string };

const via = (base: string, target: string, ip: string, options: Sent = {}) =>
  rawRequest(base, { method: options.method, target, headers: [["cf-connecting-ip", ip], ...(options.headers ?? [])], body: options.body });

/** The handler the origin runs for a request sent to it directly. */
async function handlerFor(target: string, options: Sent = {}): Promise<string> {
  const answer = await rawRequest(origin().url, { method: options.method, target, headers: options.headers, body: options.body });
  return (answer.headers["x-handler"] as string | undefined) ?? `status ${answer.status}`;
}

/** A gate whose rules allow one request a caller to the page /v1/users and one to the home page. */
const pagesGate = () =>
  gate({
    rules: [
      { name: "users", limit: 1, window: "10m", path: "/v1/users" },
      { name: "home", limit: 1, window: "10m", path: "/" },
    ],
  });

/** Each of `homes` runs the home page's handler and counts against the home page's rule: a fresh caller's request to it after one to / is refused. */
async function expectHomeCounted(pages: string, homes: readonly string[]) {
  for (const home of homes) {
    expect(await handlerFor(home), home).toBe(await handlerFor("/"));
    const other = freshIpv4();
    expect((await via(pages, "/", other)).status).toBe(200);
    expect((await via(pages, home, other)).status, home).toBe(429);
  }
}

/**
 * Each spelling reaches `handler` when sent to the origin directly; once `spend` has spent the
 * rule (`times` requests admitted), the gate refuses each spelling with 429, and only the
 * spending requests reached the origin.
 */
async function expectCountedAsOne(gate: string, spend: string, spellings: readonly string[], { handler = "users", times = 1 } = {}) {
  for (const spelling of spellings) expect(await handlerFor(spelling), spelling).toBe(handler);
  const ip = freshIpv4();
  const before = origin().hits(handler);
  for (let i = 0; i < times; i++) expect((await via(gate, spend, ip)).status).toBe(200);
  for (const spelling of spellings) expect((await via(gate, spelling, ip)).status, spelling).toBe(429);
  expect(origin().hits(handler) - before).toBe(times);
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

describe("path encodings: a rule covers every spelling the origin routes to the same handler", () => {
  let base: string;
  beforeAll(async () => {
    base = await gate({ rules: [{ name: "users", limit: 1, window: "10m", path: "/v1/*" }] });
  });

  const spellings = ["/%76%31/users", "/v%31/users", "//v1/users", "/V1/users", "/v1;x/users", "/v1/users/", "/v1/%75sers", "/V1//USERS;jsessionid=1/", "/public/..;/v1/users"];
  it.each(spellings)("%s counts against the /v1/* rule once /v1/users spent it", async (spelling) => {
    expect(await handlerFor(spelling)).toBe("users"); // the origin's own routing: the same handler
    const ip = freshIpv4();
    const before = origin().hits("users");
    expect((await via(base, "/v1/users", ip)).status).toBe(200);
    const other = await via(base, spelling, ip);
    expect(other.status).toBe(429);
    expect(origin().hits("users") - before).toBe(1);
  });

  it("/v1 counts against the /v1/* rule once /v1/ spent it: the origin routes both alike", async () => {
    expect(await handlerFor("/v1")).toBe("v1");
    expect(await handlerFor("/v1/")).toBe("v1");
    const ip = freshIpv4();
    const before = origin().hits("v1");
    expect((await via(base, "/v1/", ip)).status).toBe(200);
    for (const spelling of ["/v1", "/V1", "//v1", "/v1;x", "/v1."]) expect((await via(base, spelling, ip)).status, spelling).toBe(429);
    expect(origin().hits("v1") - before).toBe(1);
  });

  it("a page's Next.js data route and segment prefetches count against the page's rule: Next.js routes them as the page (its getServerSideProps runs)", async () => {
    const pages = await pagesGate();
    const spellings = [
      "/_next/data/b1d/v1/users.json",
      "/_next/data/Build-42/V1/Users.json",
      "/v1/users.segments/_tree.segment.rsc",
      "/v1/users.segments/$c$children/__PAGE__.segment.rsc",
    ];
    await expectCountedAsOne(pages, "/v1/users", spellings);
    // the home page's data route is /index.json: Next.js reads /index as /
    await expectHomeCounted(pages, ["/_next/data/b1d/index.json"]);
  });

  it("a page's SvelteKit, React Router, Nuxt, Gatsby and Qwik City data requests count against the page's rule: they run its server load functions, loaders and data fetching", async () => {
    const pages = await pagesGate();
    // SvelteKit's client navigates to /v1/users?q=x by fetching /v1/users/__data.json?q=x&x-sveltekit-invalidated=01
    const spellings = [
      "/v1/users/__data.json",
      "/V1/Users/__data.json?q=x&x-sveltekit-invalidated=01",
      "/v1/users/_.data",
      "/v1/users.data?_routes=routes%2Fusers",
      "/v1/users/_payload.json",
      "/v1/users/_payload.js?b1d",
      "/page-data/v1/users/page-data.json",
      "/v1/users/q-data.json",
    ];
    await expectCountedAsOne(pages, "/v1/users", spellings);
    await expectHomeCounted(pages, ["/__data.json", "/_root.data", "/_.data", "/_payload.json", "/page-data/index/page-data.json", "/q-data.json"]);
  });

  it("a directory's index script counts against the directory's rule, and the directory against the script's: servers run it for both (Apache's DirectoryIndex, nginx's index)", async () => {
    const indexes = await gate({
      rules: [
        { name: "users", limit: 1, window: "10m", path: "/v1/users" },
        { name: "v1-index", limit: 1, window: "10m", path: "/v1/index.php" },
        { name: "home", limit: 1, window: "10m", path: "/" },
      ],
    });
    const spellings = ["/v1/users/index.php", "/V1/Users/INDEX.PHP", "/v1/users/index.php.", "/v1/users/index.php;x", "/v1/users/default.aspx"];
    await expectCountedAsOne(indexes, "/v1/users", spellings);
    // the other way: the directory is the script a rule names, and / is /index.php
    expect(await handlerFor("/v1/")).toBe("v1");
    expect(await handlerFor("/v1/index.php")).toBe("v1");
    const other = freshIpv4();
    expect((await via(indexes, "/v1/index.php", other)).status).toBe(200);
    for (const spelling of ["/v1/", "/v1"]) expect((await via(indexes, spelling, other)).status, spelling).toBe(429);
    expect(await handlerFor("/index.php")).toBe(await handlerFor("/"));
    const third = freshIpv4();
    expect((await via(indexes, "/", third)).status).toBe(200);
    expect((await via(indexes, "/index.php", third)).status).toBe(429);
  });

  it("a controller's index action counts against the rule of the controller's path, and the other way: MVC routing runs /v1/users/index as /v1/users (ASP.NET MVC, CakePHP, CodeIgniter, Yii)", async () => {
    const actions = await gate({
      rules: [
        { name: "users", limit: 1, window: "10m", path: "/v1/users" },
        { name: "v1-index", limit: 1, window: "10m", path: "/v1/index" },
      ],
    });
    await expectCountedAsOne(actions, "/v1/users", ["/v1/users/index", "/V1/Users/Index", "/v1/users/index/", "/v1/users/index."]);
    expect(await handlerFor("/v1/index")).toBe("v1");
    const other = freshIpv4();
    expect((await via(actions, "/v1/index", other)).status).toBe(200);
    for (const spelling of ["/v1/", "/v1"]) expect((await via(actions, spelling, other)).status, spelling).toBe(429);
  });

  it("a rule whose glob ends in an extension covers the path with trailing dots, as IIS serves it", async () => {
    const php = await gate({ rules: [{ name: "php", limit: 1, window: "10m", path: "/*.php" }] });
    const ip = freshIpv4();
    expect((await via(php, "/index.php", ip)).status).toBe(200);
    for (const spelling of ["/index.php.", "/index.php./", "/wp-login.php..", "/a./b.php."]) expect((await via(php, spelling, ip)).status, spelling).toBe(429);
  });

  // Leniencies of stacks the framework origin does not route like: each spelling must count
  // against the rule of the path it names to them, with the origin reached once.
  describe("spellings other stacks route to a rule's path", () => {
    let exact: string;
    beforeAll(async () => {
      exact = await gate({
        rules: [
          { name: "users", limit: 1, window: "10m", path: "/v1/users" },
          { name: "admin", limit: 1, window: "10m", path: "/admin/*" },
        ],
      });
    });
    const spentThenRefused = async (first: string, spellings: string[]) => {
      const ip = freshIpv4();
      const before = origin().hits("users") + origin().hits("echo");
      expect((await via(exact, first, ip)).status).toBe(200);
      for (const spelling of spellings) expect((await via(exact, spelling, ip)).status, spelling).toBe(429);
      expect(origin().hits("users") + origin().hits("echo") - before).toBe(1);
    };

    it("the path behind a front controller counts against its rule: Symfony and Laravel route /index.php/v1/users as /v1/users", async () => {
      await spentThenRefused("/v1/users", ["/index.php/v1/users", "/app.php/v1/users/", "/index.php;x/v1/users"]);
    });

    it("ASP.NET's cookieless session data in the path counts against the rule of the path without it, which the .NET Framework routes", async () => {
      await spentThenRefused("/v1/users", ["/(S(x))/v1/users", "/v1/us/(S(x))ers", "/v1/(A(y)S(z))/users"]);
    });

    it("an escaped ? or # after the path counts against its rule: a rewrite into a new URL (Apache mod_rewrite, nginx proxy_pass with a variable) ends the path there", async () => {
      await spentThenRefused("/v1/users", ["/v1/users%3F", "/v1/users%3Fx=1", "/v1/users%23", "/v1/users%3F/x", "/v1/users%253F"]);
    });

    it("a ; and the path after it count against the rule of the path before it: Fastify 4 starts the query there", async () => {
      await spentThenRefused("/v1/users", ["/v1/users;x/y", "/v1/users;/a/b"]);
    });

    it("spaces and control characters around a segment, or trailing dots and spaces, count against its rule: Windows and Spring's trimTokens drop them", async () => {
      // and a final newline, before which a regex router's `$` matches (PCRE, Python, Ruby)
      await spentThenRefused("/v1/users", ["/v1/users%20", "/v1/users.%20", "/v1/%20users", "/v1%09/users", "/v1/users%20./", "/v1/users%0A", "/v1/users%0D%0A"]);
    });

    it("İ or ı for i counts against a case-insensitive rule: Java's caseless comparison reads both as i", async () => {
      await spentThenRefused("/admin/x", ["/adm%C4%B0n/x", "/adm%C4%B1n/x", "/ADM%C4%B1N/y"]);
    });
  });

  it("a rule on a script covers the paths beneath it, which Apache and IIS run as that script with PATH_INFO", async () => {
    const php = await gate({
      rules: [
        { name: "php", limit: 1, window: "10m", path: "/*.php" },
        { name: "rpc", limit: 1, window: "10m", path: "/xmlrpc.php" },
      ],
    });
    const ip = freshIpv4();
    expect((await via(php, "/wp-login.php", ip)).status).toBe(200);
    for (const spelling of ["/wp-login.php/x", "/wp-login.php/", "/wp-login.php./x"]) expect((await via(php, spelling, ip)).status, spelling).toBe(429);
    const other = freshIpv4();
    expect((await via(php, "/xmlrpc.php/a", other)).status).toBe(200);
    expect((await via(php, "/xmlrpc.php/b", other)).status).toBe(429);
  });

  it("refuses an encoded slash, backslash or NUL (or an overlong or %u escape) with 400 problem+json, before any quota or origin", async () => {
    for (const target of [
      "/v1%2Fusers",
      "/v1%2fusers",
      "/v1%5Cusers",
      "/v1/users%00",
      "/v1/%2e%2e%2Fv1/users",
      "/v1%C0%AFusers",
      "/v1%F8%80%80%80%AFusers",
      "/v1%FC%80%80%80%80%AFusers",
      "/v1%u002Fusers",
    ]) {
      const before = origin().hits("users") + origin().hits("echo");
      const res = await via(base, target, freshIpv4());
      expect(res.status, target).toBe(400);
      expect(res.headers["content-type"]).toBe("application/problem+json");
      expect(JSON.parse(res.body)).toMatchObject({ type: "urn:slidegate:invalid-path", status: 400 });
      expect(origin().hits("users") + origin().hits("echo")).toBe(before);
    }
  });

  it("forwards the canonical path, the one it matched, to the origin", async () => {
    const res = await via(base, "//%76%31/./x/../users;v=2?q=%2F", freshIpv4());
    expect(res.status).toBe(200);
    expect((JSON.parse(res.body) as Echo).target).toBe("/v1/users;v=2?q=%2F");
  });

  // Spellings of /v1/users built from every leniency at once; the origin says which reach it.
  const hex = (c: string) => c.charCodeAt(0).toString(16).padStart(2, "0");
  const char = (c: string) => fc.constantFrom(c, c.toUpperCase(), `%${hex(c)}`, `%${hex(c).toUpperCase()}`, `%${hex(c.toUpperCase())}`);
  const segment = (word: string) =>
    fc
      .tuple(
        fc.tuple(...[...word].map(char)).map((cs) => cs.join("")),
        fc.constantFrom("", "", ";", ";a=1", ";jsessionid=X"),
      )
      .map(([w, p]) => w + p);
  const slash = fc.constantFrom("/", "/", "//", "///", "/./", "/x/../", "/%2e/", "/..;/");
  const spelling = fc
    .tuple(slash, segment("v1"), slash, segment("users"), fc.constantFrom("", "/", "//", "/."), fc.constantFrom("", "", "?a=1"))
    .map(([a, v, b, u, end, query]) => `${a}${v}${b}${u}${end}${query}`);

  it("no spelling the origin routes to /v1/users gets past the spent rule (fast-check)", async () => {
    await fc.assert(
      fc.asyncProperty(spelling, async (target) => {
        const ip = freshIpv4();
        expect((await via(base, "/v1/users", ip)).status).toBe(200);
        const routed = await handlerFor(target);
        const before = origin().hits("users");
        const res = await via(base, target, ip);
        // the origin's users handler ran for the first request only
        expect(origin().hits("users") - before, `${target} reached the users handler (gate answered ${res.status})`).toBe(0);
        if (routed === "users") expect([400, 429]).toContain(res.status);
      }),
      { numRuns: 150 },
    );
  }, 120_000);
});

describe("query routing: a PHP application's front script routes by its query", () => {
  let routes: string;
  beforeAll(async () => {
    routes = await gate({
      rules: [
        { name: "users", limit: 2, window: "10m", path: "/v1/users" },
        { name: "wp-json", limit: 2, window: "10m", path: "/wp-json/*" },
      ],
    });
  });

  it("a query-routed spelling (?rest_route=, ?q=, ?r=) counts against the rules of the path it routes to", async () => {
    // Drupal 7's ?q=, Yii's ?r= and CodeIgniter 3's ?/path on the front script, names as PHP reads
    // them (escaped, mangled, cut at a NUL, the last of a repeated one), values escaped or without
    // their leading slash
    const spellings = [
      "/?q=v1/users",
      "/index.php?q=/v1/users",
      "/?r=v1/users",
      "/index.php?r=V1/Users",
      "/?%71=v1/users",
      "/?+q=v1/users",
      "/?q%00x=v1/users",
      "/?q=elsewhere&q=v1/users",
      "/?q=v1/%75sers",
      "/?q=%2Fv1%2Fusers%2F",
      "/index.php/?q=v1/users",
      "//index.php.?r=v1/users",
      "/?/v1/users",
      "/index.php?/v1/users?x=1",
      // the front script with PATH_INFO after it: Drupal 7 and Yii route by the query whatever it holds
      "/index.php/v1?q=v1/users",
      "/index.php/anything/else?r=v1/users",
      "/INDEX.PHP/x/?q=v1/users",
      // dot segments in the value, which the application does not resolve (CodeIgniter 3 drops them,
      // Drupal 7 routes by the longest registered prefix): the query reaches it as sent
      "/?q=v1/users/../..",
      "/?/v1/users/..",
      "/?r=v1/users/%2E%2E/.",
    ];
    await expectCountedAsOne(routes, "/v1/users", spellings, { times: 2 });
    // WordPress's ?rest_route=, on any path, as its REST route behind /wp-json
    const rest = [
      "/?rest_route=/wp/v2/users",
      "/index.php?rest_route=/wp/v2/users",
      "/?rest.route=/wp/v2/users",
      "/?rest+route=/wp/v2/users",
      "/?rest[route=/wp/v2/users",
      "/?%20rest_route=/wp/v2/users",
      "/?%72est_route=/wp/v2/users",
      "/?rest_route=/wp/v2/%75sers",
      "/?rest_route=wp/v2/users",
      "/?rest_route=/x&rest_route=/wp/v2/users",
      "/v1/users?rest_route=/wp/v2/users",
      "/hello-world/?rest_route=/wp/v2/users",
    ];
    await expectCountedAsOne(routes, "/wp-json/wp/v2/users", rest, { handler: "wp-json", times: 2 });
  });

  it("forwards a query-routed request as sent, and counts ?q= only on the front script", async () => {
    const ip = freshIpv4();
    const sent = await via(routes, "/index.php?q=v1/users&x=%2F", ip);
    expect(sent.status).toBe(200);
    expect((JSON.parse(sent.body) as Echo).target).toBe("/index.php?q=v1/users&x=%2F");
    expect((await via(routes, "/v1/users", ip)).status).toBe(200);
    // elsewhere ?q= is a query like any other: /v1 is not a front script
    expect(await handlerFor("/v1?q=v1/users")).toBe("v1");
    expect((await via(routes, "/v1?q=v1/users", ip)).status).toBe(200);
    expect((await via(routes, "/v1/users", ip)).status).toBe(429);
  });

  it("a query-routed path the gate would refuse as a path counts against every rule, and is forwarded, not refused", async () => {
    // a search for C:\Windows on the home page is a valid request: not a 400, and not a way around
    // a rule either: it counts against every rule, as the library counts a path it would refuse
    for (const target of ["/?q=C:%5CWindows", "/?rest_route=/wp/v2/users%00", "/?r=v1%252Fusers", "/?q=%25C0%25AF"]) {
      const ip = freshIpv4();
      const res = await via(routes, target, ip);
      expect(res.status, target).toBe(200);
      expect((JSON.parse(res.body) as Echo).target).toBe(target);
      expect((await via(routes, "/v1/users", ip)).status, target).toBe(200);
      expect((await via(routes, "/v1/users", ip)).status, target).toBe(429);
      expect((await via(routes, "/wp-json/wp/v2/users", ip)).status, target).toBe(200);
      expect((await via(routes, "/wp-json/wp/v2/users", ip)).status, target).toBe(429);
    }
  });
});

describe("a path a server rewrites into the front script's query: a & in it starts another parameter", () => {
  // Apache's RewriteRule ^(.*)$ index.php?q=$1 (Drupal 6) puts the decoded path into the query
  // unescaped, and nginx's rewrite ^/(.*)$ /index.php?q=$1 (Drupal 7's @rewrite) a raw & in it:
  // the origin (test/helpers/framework-origin.ts) routes so
  let rewrites: string;
  beforeAll(async () => {
    rewrites = await gate({
      rules: [
        { name: "login", limit: 2, window: "10m", path: "/user/login" },
        { name: "wp-json", limit: 2, window: "10m", path: "/wp-json/*" },
        { name: "users", limit: 1, window: "10m", path: "/v1/users" },
      ],
    });
  });

  it("a ?q= after a & in the path (%26 or raw) counts against the rules of the path it routes to", async () => {
    const login = ["/x%26q=user/login", "/x&q=user/login", "/v1/things&q=user/login", "/x&q=a&q=user/login", "/x&%2571=user/login", "/x&+q=user/login"];
    await expectCountedAsOne(rewrites, "/user/login", login, { handler: "login", times: 2 });
  });

  it("a rest_route after a & in the path counts against the rules of its REST route: WordPress reads it on any request that reaches its index.php", async () => {
    const rest = ["/x%26rest_route=/wp/v2/users", "/x&rest_route=/wp/v2/users", "/x&rest.route=/wp/v2/users"];
    await expectCountedAsOne(rewrites, "/wp-json/wp/v2/users", rest, { handler: "wp-json", times: 2 });
  });

  it("the path before a & counts against its rules: the rewrite makes it the value of its own parameter", async () => {
    await expectCountedAsOne(rewrites, "/v1/users", ["/v1/users&x=1", "/v1/users%26", "/V1/Users&sort=asc"]);
  });

  it("a path with a & that routes nowhere else reaches the origin as sent and counts only where it should", async () => {
    const ip = freshIpv4();
    const sent = await via(rewrites, "/v1/things&sort=asc", ip);
    expect(sent.status).toBe(200);
    expect((JSON.parse(sent.body) as Echo).target).toBe("/v1/things&sort=asc");
    const escaped = await via(rewrites, "/v1/things%26sort=asc", ip);
    expect(escaped.status).toBe(200);
    expect((JSON.parse(escaped.body) as Echo).target).toBe("/v1/things%26sort=asc");
    // no other rule was spent
    expect((await via(rewrites, "/v1/users", ip)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await via(rewrites, "/user/login", ip)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await via(rewrites, "/wp-json/wp/v2/users", ip)).status).toBe(200);
  });

  it("a routed value the gate would refuse as a path counts against every rule, and is forwarded, not refused", async () => {
    for (const target of ["/x&q=C:%255CWindows", "/x%26rest_route=/wp/v2/users%2500"]) {
      const ip = freshIpv4();
      const res = await via(rewrites, target, ip);
      expect(res.status, target).toBe(200);
      expect((JSON.parse(res.body) as Echo).target).toBe(target);
      expect((await via(rewrites, "/v1/users", ip)).status, target).toBe(429);
      expect((await via(rewrites, "/user/login", ip)).status, target).toBe(200);
      expect((await via(rewrites, "/user/login", ip)).status, target).toBe(429);
    }
  });
});

describe("methods: HEAD and overridden methods count where their handler's method does", () => {
  let base: string;
  beforeAll(async () => {
    base = await gate({
      rules: [
        { name: "reads", limit: 2, window: "10m", path: "/v1/users", methods: ["GET"] },
        { name: "deletes", limit: 1, window: "10m", path: "/v1/users/*", methods: ["DELETE"] },
      ],
    });
  });

  it("a GET rule limits HEAD, which the origin serves with its GET handler", async () => {
    expect(await handlerFor("/v1/users", { method: "HEAD" })).toBe("users");
    const ip = freshIpv4();
    const before = origin().hits("users");
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await via(base, "/v1/users", ip, { method: "HEAD" })).status);
    codes.push((await via(base, "/v1/users", ip)).status);
    expect(codes).toEqual([200, 200, 429, 429]);
    expect(origin().hits("users") - before).toBe(2);
  });

  it("a rule on /v1/users covers /v1/users.json and /v1/users., which the origin routes to the same handler", async () => {
    const spellings = [
      "/v1/users.json",
      "/v1/users.",
      "/V1/Users.XML",
      "/v1/users.json/",
      "/v1/users..",
      "/v1/users;x.json",
      "/v1/users.a-b",
      "/v1/users.a_b",
      "/v1/users.%C3%A9",
      "/v1/users.json~",
      "/v1/users..json",
      "/v1/users.tar.gz",
      "/v1./users",
    ];
    await expectCountedAsOne(base, "/v1/users", spellings, { times: 2 });
  });

  it("a rule written with a format suffix covers the path without it and with any other suffix, which the origin routes alike", async () => {
    const suffixed = await gate({ rules: [{ name: "json", limit: 1, window: "10m", path: "/v1/users.json" }] });
    const spellings = ["/v1/users", "/v1/users.xml", "/v1/users.html", "/v1/users/", "/v1/users.json"];
    await expectCountedAsOne(suffixed, "/v1/users.json", spellings);
  });

  it("a DELETE rule limits a POST whose form body overrides its method to DELETE", async () => {
    const form: Sent = { method: "POST", headers: [["content-type", "application/x-www-form-urlencoded"]], body: "_method=DELETE" };
    const boundary = "b0undary";
    const multipart: Sent = {
      method: "POST",
      headers: [["content-type", `multipart/form-data; boundary=${boundary}`]],
      body: `--${boundary}\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--${boundary}--\r\n`,
    };
    expect(await handlerFor("/v1/users/7", form)).toBe("delete-user");
    expect(await handlerFor("/v1/users/7", multipart)).toBe("delete-user");
    const ip = freshIpv4();
    expect((await via(base, "/v1/users/1", ip, { method: "DELETE" })).status).toBe(200);
    const before = origin().hits("delete-user");
    expect((await via(base, "/v1/users/2", ip, form)).status).toBe(429);
    expect((await via(base, "/v1/users/3", ip, multipart)).status).toBe(429);
    expect((await via(base, "/v1/users/4", ip, { ...form, method: "PUT", headers: [["content-type", "Application/X-WWW-Form-Urlencoded; charset=utf-8"]] })).status).toBe(429);
    // what Rack (a POST with no media type, multipart/mixed) and Laravel (a JSON body) obey, and
    // PHP's reading of ?.method= as _method
    expect((await via(base, "/v1/users/5", ip, { method: "POST", body: "_method=DELETE" })).status).toBe(429);
    expect((await via(base, "/v1/users/6", ip, { method: "POST", headers: [["content-type", "application/json"]], body: '{"_method":"DELETE"}' })).status).toBe(429);
    expect((await via(base, "/v1/users/7", ip, { ...multipart, headers: [["content-type", `multipart/mixed; boundary=${boundary}`]] })).status).toBe(429);
    expect((await via(base, "/v1/users/8?.method=DELETE", ip, { method: "POST" })).status).toBe(429);
    expect(origin().hits("delete-user") - before).toBe(0);
  });

  it("a DELETE rule limits a HEAD whose form body overrides its method to DELETE: Hono's methodOverride passes over a GET alone, and a Worker receives a HEAD's body", async () => {
    const hono = await startHonoWorkerOrigin();
    try {
      const deletes = await gate({ rules: [{ name: "deletes", limit: 1, window: "10m", path: "/v1/users/*", methods: ["DELETE"] }] }, { ORIGIN_URL: hono.url });
      const boundary = "b0undary";
      const multipart = `--${boundary}\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--${boundary}--\r\n`;
      // (Node's client sends a HEAD's body only with its length declared)
      const overrides: Sent[] = [
        {
          method: "HEAD",
          headers: [
            ["content-type", "application/x-www-form-urlencoded"],
            ["content-length", "14"],
          ],
          body: "_method=DELETE",
        },
        {
          method: "HEAD",
          headers: [
            ["content-type", `multipart/form-data; boundary=${boundary}`],
            ["content-length", String(multipart.length)],
          ],
          body: multipart,
        },
      ];
      // the origin's own routing, sent directly: the DELETE handler runs
      for (const sent of overrides) expect((await rawRequest(hono.url, { target: "/v1/users/7", ...sent })).headers["x-handler"]).toBe("delete-user");
      const ip = freshIpv4();
      expect((await via(deletes, "/v1/users/1", ip, { method: "DELETE" })).status).toBe(200);
      for (const [i, sent] of overrides.entries()) {
        const answer = await via(deletes, `/v1/users/${i + 2}`, ip, sent);
        expect({ status: answer.status, handler: answer.headers["x-handler"] }, sent.headers![0]![1]).toEqual({ status: 429, handler: undefined });
      }
      // a HEAD without a form still counts only where its GET does
      expect((await via(deletes, "/v1/users/9", ip, { method: "HEAD" })).status).toBe(200);
    } finally {
      await hono.close();
    }
  });

  it("a PATCH rule limits PUT, which the origin sends to the same update handler (Rails' and Laravel's resources)", async () => {
    const updates = await gate({ rules: [{ name: "updates", limit: 1, window: "10m", path: "/v1/users/*", methods: ["PATCH"] }] });
    expect(await handlerFor("/v1/users/7", { method: "PUT" })).toBe("update-user");
    expect(await handlerFor("/v1/users/7", { method: "PATCH" })).toBe("update-user");
    const ip = freshIpv4();
    const before = origin().hits("update-user");
    expect((await via(updates, "/v1/users/1", ip, { method: "PATCH" })).status).toBe(200);
    expect((await via(updates, "/v1/users/2", ip, { method: "PUT" })).status).toBe(429);
    expect(origin().hits("update-user") - before).toBe(1);
  });

  it("a POST declared empty names no method: it does not count against the GET rule of its path", async () => {
    const ip = freshIpv4();
    for (let i = 0; i < 3; i++) await via(base, "/v1/users", ip, { method: "POST", headers: [["content-length", "0"]] });
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await via(base, "/v1/users", ip)).status);
    expect(codes).toEqual([200, 200, 429]);
  });

  it("a DELETE rule limits a POST that overrides its method to DELETE", async () => {
    const override: [string, string][] = [["x-http-method-override", "DELETE"]];
    expect(await handlerFor("/v1/users/7", { method: "POST", headers: override })).toBe("delete-user");
    expect(await handlerFor("/v1/users/7?_%6Dethod=DELETE", { method: "POST", headers: [["content-length", "0"]] })).toBe("delete-user");
    const ip = freshIpv4();
    expect((await via(base, "/v1/users/1", ip, { method: "DELETE" })).status).toBe(200);
    const before = origin().hits("delete-user");
    expect((await via(base, "/v1/users/2", ip, { method: "POST", headers: override })).status).toBe(429);
    expect((await via(base, "/v1/users/3?_method=DELETE", ip, { method: "POST" })).status).toBe(429);
    expect((await via(base, "/v1/users/4?_%6Dethod=DELETE", ip, { method: "POST", headers: [["content-length", "0"]] })).status).toBe(429);
    expect(origin().hits("delete-user") - before).toBe(0);
  });

  it("a DELETE rule limits a POST whose query names _method with a NUL and more after it: PHP ends a parameter's name at a NUL, so Laravel and Symfony read _method", async () => {
    const ip = freshIpv4();
    expect((await via(base, "/v1/users/1", ip, { method: "DELETE" })).status).toBe(200);
    for (const query of ["?_method%00=DELETE", "?_method%00x=DELETE", "?.method%00[x]=DELETE"]) {
      expect((await via(base, `/v1/users/2${query}`, ip, { method: "POST", headers: [["content-length", "0"]] })).status, query).toBe(429);
    }
  });
});

describe("headers an origin would read another way never reach it", () => {
  const ADMIN = "evasion-admin-token-2-0123456789abcdef";
  let base: string;
  beforeAll(async () => {
    base = await gate({ identity: { header: "x-api-key" }, rules: [{ name: "m", limit: 100, window: "10m" }] }, { ADMIN_TOKEN: ADMIN });
  });

  it("drops path-rewriting headers and the underscore spellings of the key and method-override headers", async () => {
    const res = await via(base, "/anything", freshIpv4(), {
      method: "POST",
      headers: [
        ["x-api-key", "the-key-the-gate-counts"],
        ["X-Original-URL", "/v1/users"],
        ["X-Rewrite-URL", "/v1/users"],
        ["X-Original-URI", "/v1/users"],
        ["X-Forwarded-Prefix", "/v1"],
        ["X-Script-Name", "/v1"],
        ["X_API_Key", "another-key"],
        ["x-api_key", "yet-another-key"],
        ["X_HTTP_Method_Override", "DELETE"],
        ["X-HTTP_Method-Override", "DELETE"],
        ["X_HTTP_METHOD", "DELETE"],
        ["x_method_override", "DELETE"],
      ],
    });
    expect(res.status).toBe(200);
    const echo = JSON.parse(res.body) as Echo;
    expect(echo.headers["x-api-key"]).toBe("the-key-the-gate-counts");
    expect(Object.keys(echo.headers).filter((h) => /original|rewrite|prefix|script|_/.test(h))).toEqual([]);
  });

  it("drops the dotted spellings of the key, client address, method-override and routing headers: PHP behind Caddy or FrankenPHP reads `.` in a name as `-`", async () => {
    // Caddy's FastCGI transport and FrankenPHP pass `X.API.Key` on as HTTP_X.API.KEY, and PHP
    // registers a server variable with `.` as `_` (php_register_variable_ex): Symfony and
    // Laravel then read it as X-API-Key. A key the gate never counted (or deny-listed) would
    // reach the origin as the caller's key, and a forged X.Forwarded.For as its address.
    const asPhpReadsIt = (name: string) => `HTTP_${name.toUpperCase().replace(/[-.]/g, "_")}`;
    const denied = `dotted-denied-${crypto.randomUUID()}`;
    const lists = await gate({ identity: { header: "x-api-key" }, deny: { keys: [sha256(denied)] }, rules: [{ name: "m", limit: 100, window: "10m" }] });
    const ip = freshIpv4();
    const res = await via(lists, "/anything", ip, {
      method: "POST",
      headers: [
        ["X-API-Key", "the-key-the-gate-counts"],
        ["X.API.Key", denied],
        ["x-api.key", denied],
        ["X.Forwarded.For", "10.9.8.7"],
        ["X-Forwarded.For", "10.9.8.7"],
        ["X.HTTP.Method.Override", "DELETE"],
        ["X.Original.URL", "/v1/users"],
      ],
    });
    expect(res.status).toBe(200);
    const echo = JSON.parse(res.body) as Echo;
    const read = new Map<string, string[]>();
    for (const name of Object.keys(echo.headers)) read.set(asPhpReadsIt(name), [...(read.get(asPhpReadsIt(name)) ?? []), name]);
    expect(read.get("HTTP_X_API_KEY")).toEqual(["x-api-key"]);
    expect(read.get("HTTP_X_FORWARDED_FOR")).toEqual(["x-forwarded-for"]);
    expect(echo.headers["x-forwarded-for"]).toBe(ip);
    expect(read.get("HTTP_X_HTTP_METHOD_OVERRIDE")).toBeUndefined();
    expect(read.get("HTTP_X_ORIGINAL_URL")).toBeUndefined();
    // alone, the deny-listed key reaches the origin in no spelling
    const alone = JSON.parse((await via(lists, "/anything", freshIpv4(), { headers: [["X.API.Key", denied]] })).body) as Echo;
    expect(Object.values(alone.headers)).not.toContain(denied);
  });

  it("drops the headers origins route by even when the operator passes forwarding headers on", async () => {
    const passing = await gate({ passForwardedHeaders: true, rules: [{ name: "m", limit: 100, window: "10m" }] });
    const res = await via(passing, "/anything", freshIpv4(), {
      headers: [
        ["X-Original-URL", "/v1/users"],
        ["X-Rewrite-URL", "/v1/users"],
        ["X-Original-URI", "/v1/users"],
        ["X-Script-Name", "/v1"],
        ["X-Forwarded-Prefix", "/v1"],
      ],
    });
    const echo = JSON.parse(res.body) as Echo;
    expect(Object.keys(echo.headers).filter((h) => /original|rewrite|script|prefix/.test(h))).toEqual(["x-forwarded-prefix"]);
  });

  it("forwards a key header configured with `_` as it is, and no other spelling of it", async () => {
    const underscored = await gate({ identity: { header: "X_API_Key" }, rules: [{ name: "m", limit: 100, window: "10m" }] });
    const res = await via(underscored, "/anything", freshIpv4(), {
      headers: [
        ["X_API_Key", "counted"],
        ["X-API-Key", "not-counted"],
        ["x-api_key", "nor-this"],
      ],
    });
    expect(res.status).toBe(200);
    const echo = JSON.parse(res.body) as Echo;
    expect(echo.headers.x_api_key).toBe("counted");
    expect(Object.keys(echo.headers).filter((h) => /api/.test(h))).toEqual(["x_api_key"]);
  });

  it("never forwards a spelling of the admin prefix, with parameters or trailing dots, to the origin", async () => {
    const before = origin().hits("echo");
    for (const target of ["/__slidegate;x/usage", "/__slidegate;/", "/__slidegate.;/usage", "/__slidegate./usage", "/__SLIDEGATE;x/usage", "/__slidegate;x"]) {
      const res = await via(base, target, freshIpv4(), { method: "POST", headers: [["authorization", "Bearer wrong"]], body: "{}" });
      expect(res.headers["x-handler"], target).toBeUndefined();
      expect([308, 401, 404], target).toContain(res.status);
    }
    expect(origin().hits("echo")).toBe(before);
  });

  it("never forwards the admin prefix spelt with ſ for s or İ or ı for i, as a case-insensitive rule reads them: it takes the admin token there too", async () => {
    const before = origin().hits("echo");
    for (const target of ["/__%C5%BFlidegate/usage", "/__sl%C4%B0degate/usage", "/__SL%C4%B1DEGATE/usage", "/__%C5%BFl%C4%B1degate/", "/__sl%C4%B0degate"]) {
      const res = await via(base, target, freshIpv4(), { method: "POST", headers: [["authorization", "Bearer wrong"]], body: "{}" });
      expect(res.headers["x-handler"], target).toBeUndefined();
      expect([308, 401], target).toContain(res.status);
    }
    expect(origin().hits("echo")).toBe(before);
    // the route beneath it, with the right token, is the admin route
    const res = await via(base, "/__%C5%BFlidegate/usage", freshIpv4(), { method: "POST", headers: [["authorization", `Bearer ${ADMIN}`]], body: '{"ip":"203.0.113.9"}' });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toMatchObject({ identity: { kind: "ip" } });
  });
});

describe("a Connection header never hides from the origin the key the gate counted", () => {
  // A proxy drops the headers a Connection header lists (RFC 9110 §7.6.1). Had it dropped the
  // key header, a caller whose address had spent its quota would send a made-up key, be counted
  // as that key (fresh quota, each time a new one), and reach the origin as an anonymous caller.
  it.each([
    ["x-api-key", (key: string) => key],
    ["Authorization", (key: string) => `Bearer ${key}`],
  ])("%s listed in Connection still reaches the origin: an anonymous caller past its address's quota cannot pass as a made-up key", async (header, value) => {
    const base = await gate({ identity: { header }, rules: [{ name: "m", limit: 1, window: "10m" }] });
    const ip = freshIpv4();
    expect((await via(base, "/anything", ip)).status).toBe(200);
    expect((await via(base, "/anything", ip)).status).toBe(429);
    const sent = value(`made-up-${crypto.randomUUID()}`);
    const res = await via(base, "/anything", ip, {
      headers: [
        [header, sent],
        ["Connection", `${header}, x-hop`],
        ["x-hop", "1"],
      ],
    });
    expect(res.status).toBe(200);
    const echo = JSON.parse(res.body) as Echo;
    expect(echo.headers[header.toLowerCase()]).toBe(sent);
    // the other headers it lists are hop-by-hop as ever
    expect(echo.headers["x-hop"]).toBeUndefined();
  });
});

describe("an API key header sent twice: refused, never a new identity", () => {
  const ADMIN = "evasion-admin-token-0123456789abcdef";
  const denied = "key-on-the-deny-list";
  let base: string;
  beforeAll(async () => {
    base = await gate({ identity: { header: "x-api-key" }, deny: { keys: [sha256(denied)] }, rules: [{ name: "m", limit: 3, window: "10m" }] }, { ADMIN_TOKEN: ADMIN });
  });
  const twice = (key: string): [string, string][] => [
    ["x-api-key", key],
    ["x-api-key", key],
  ];
  const originHits = () => origin().hits("echo");

  it("a deny-listed key sent twice never reaches the origin", async () => {
    const before = originHits();
    for (let i = 0; i < 30; i++) {
      const res = await via(base, "/anything", freshIpv4(), { headers: twice(denied) });
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body)).toMatchObject({ type: "urn:slidegate:ambiguous-api-key" });
    }
    expect(originHits()).toBe(before);
  });

  it("a blocked key sent twice never reaches the origin", async () => {
    const key = `blocked-${crypto.randomUUID()}`;
    const block = await fetch(`${base}__slidegate/block`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, body: JSON.stringify({ key, seconds: 600 }) });
    expect(block.status).toBe(200);
    expect((await via(base, "/anything", freshIpv4(), { headers: [["x-api-key", key]] })).status).toBe(403);
    const before = originHits();
    for (let i = 0; i < 10; i++) expect((await via(base, "/anything", freshIpv4(), { headers: twice(key) })).status).toBe(400);
    expect(originHits()).toBe(before);
  });

  it("a key that spent its quota gets no fresh quota sent twice or comma-joined", async () => {
    const key = `spent-${crypto.randomUUID()}`;
    const ip = freshIpv4();
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await via(base, "/anything", ip, { headers: [["x-api-key", key]] })).status);
    expect(codes).toEqual([200, 200, 200, 429]);
    expect((await via(base, "/anything", ip, { headers: twice(key) })).status).toBe(400);
    expect((await via(base, "/anything", ip, { headers: [["x-api-key", `${key}, ${key}`]] })).status).toBe(400);
    expect((await via(base, "/anything", ip, { headers: [["x-api-key", `${key},x`]] })).status).toBe(400);
  });

  // Repetitions of a key header: as separate lines, comma-joined, padded, empty among them.
  const variant = fc.constantFrom("K", " K", "K ", "\tK", "", "other");
  const repetition = fc.record({
    values: fc.array(variant, { minLength: 2, maxLength: 4 }),
    joined: fc.boolean(),
  });

  it("every repetition of the key header is refused and reaches nothing (fast-check)", async () => {
    const key = `repeat-${crypto.randomUUID()}`;
    await fc.assert(
      fc.asyncProperty(repetition, async ({ values, joined }) => {
        const lines = values.map((v) => v.replace("K", key).replace("other", `other-${key}`));
        const headers: [string, string][] = joined ? [["x-api-key", lines.join(",")]] : lines.map((v) => ["x-api-key", v]);
        const before = originHits();
        const res = await via(base, "/anything", freshIpv4(), { headers });
        expect(res.status, JSON.stringify(headers)).toBe(400);
        expect(originHits()).toBe(before);
      }),
      { numRuns: 60 },
    );
  }, 60_000);
});

describe("one key at the origin is one key at the gate, however the origin trims it", () => {
  // Node sends a header value's characters as bytes (latin1): "\u0085" goes out as the byte 0x85,
  // which an origin reading headers as latin1 (WSGI, servlets, Node) gets as U+0085 — trimmed by
  // Python's str.strip() and .NET's Trim(), kept by JavaScript's trim(). workerd hands the Worker
  // that byte as U+FFFD (it decodes UTF-8); UTF-8's C2 85 reaches it as U+0085.
  const utf8 = (text: string) => Buffer.from(text, "utf8").toString("latin1");
  const ADMIN = "evasion-admin-token-0123456789abcdef";
  const denied = `trim-denied-${crypto.randomUUID()}`;
  const padded = (key: string) => [`${key}\u0085`, `\u0085${key}`, `${key}\u00a0`, `${key}\u0085\u0085`, utf8(`${key}\u0085`), utf8(`\u0085${key}`)];
  let base: string;
  beforeAll(async () => {
    base = await gate({ identity: { header: "x-api-key" }, deny: { keys: [sha256(denied)] }, rules: [{ name: "m", limit: 3, window: "10m" }] }, { ADMIN_TOKEN: ADMIN });
  });
  const originHits = () => origin().hits("echo");

  it("a deny-listed key padded with what an origin trims never reaches the origin", async () => {
    const before = originHits();
    for (const value of padded(denied)) expect((await via(base, "/anything", freshIpv4(), { headers: [["x-api-key", value]] })).status, JSON.stringify(value)).toBe(403);
    expect(originHits()).toBe(before);
  });

  it("a key that spent its quota gets no fresh quota padded, and a block on it holds however it is padded or named", async () => {
    const key = `trim-spent-${crypto.randomUUID()}`;
    const ip = freshIpv4();
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await via(base, "/anything", ip, { headers: [["x-api-key", key]] })).status);
    expect(codes).toEqual([200, 200, 200, 429]);
    for (const value of padded(key)) expect((await via(base, "/anything", ip, { headers: [["x-api-key", value]] })).status, JSON.stringify(value)).toBe(429);

    // the admin API names a key as the gate reads it: padded there too, it is the same key
    const blocked = `trim-blocked-${crypto.randomUUID()}`;
    const block = await fetch(`${base}__slidegate/block`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ key: `${blocked}\u0085\u001f`, seconds: 600 }),
    });
    expect(block.status).toBe(200);
    for (const value of [blocked, ...padded(blocked)])
      expect((await via(base, "/anything", freshIpv4(), { headers: [["x-api-key", value]] })).status, JSON.stringify(value)).toBe(403);
  });

  it("a deny-listed key padded with a C0 control, which a Java origin trims, never reaches the origin: workerd lets them through", async () => {
    // Node's client refuses to send them: one request, byte for byte
    const url = new URL(base);
    const send = (value: Buffer) =>
      new Promise<string>((resolve, reject) => {
        const head = `GET /anything HTTP/1.1\r\nHost: ${url.host}\r\nConnection: close\r\ncf-connecting-ip: ${freshIpv4()}\r\nx-api-key: `;
        const socket = connect(Number(url.port), url.hostname, () => socket.end(Buffer.concat([Buffer.from(head), value, Buffer.from("\r\n\r\n")])));
        const chunks: Buffer[] = [];
        socket.on("data", (c: Buffer) => chunks.push(c));
        socket.on("end", () => resolve(Buffer.concat(chunks).toString("latin1").split("\r\n")[0]!));
        socket.on("error", reject);
      });
    const before = originHits();
    for (const byte of [0x01, 0x0b, 0x1c, 0x1f]) {
      expect(await send(Buffer.from([...Buffer.from(denied), byte])), `0x${byte.toString(16)} after`).toBe("HTTP/1.1 403 Forbidden");
      expect(await send(Buffer.from([byte, ...Buffer.from(denied)])), `0x${byte.toString(16)} before`).toBe("HTTP/1.1 403 Forbidden");
    }
    // NUL alone workerd refuses itself
    expect(await send(Buffer.from([...Buffer.from(denied), 0x00]))).toBe("HTTP/1.1 400 Bad Request");
    expect(originHits()).toBe(before);
  });
});

describe("Authorization as the key header: one token, however its scheme is spelled", () => {
  const ADMIN = "evasion-admin-token-0123456789abcdef";
  const denied = `auth-denied-${crypto.randomUUID()}`;
  // auth schemes are case-insensitive (RFC 9110 §11.1) and lenient parsers take any run of
  // whitespace after one: an origin reads each of these as the token
  const spellings = (token: string) => [`Bearer ${token}`, `bearer ${token}`, `BEARER ${token}`, `Bearer  ${token}`, `Bearer\t${token}`, ` Bearer ${token} `, token];
  let base: string;
  beforeAll(async () => {
    base = await gate({ identity: { header: "Authorization" }, deny: { keys: [sha256(denied)] }, rules: [{ name: "m", limit: 3, window: "10m" }] }, { ADMIN_TOKEN: ADMIN });
  });
  const originHits = () => origin().hits("echo");
  const blockKey = (key: string) =>
    fetch(`${base}__slidegate/block`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, body: JSON.stringify({ key, seconds: 600 }) });

  it("a deny-listed token never reaches the origin, whatever the scheme's case or the space after it", async () => {
    const before = originHits();
    for (const value of spellings(denied)) expect((await via(base, "/anything", freshIpv4(), { headers: [["authorization", value]] })).status, JSON.stringify(value)).toBe(403);
    expect(originHits()).toBe(before);
  });

  it("a token that spent its quota gets no fresh quota under another spelling, and reaches the origin as sent", async () => {
    const token = `auth-spent-${crypto.randomUUID()}`;
    const ip = freshIpv4();
    const first = await via(base, "/anything", ip, { headers: [["authorization", `bEaReR  ${token}`]] });
    expect((JSON.parse(first.body) as Echo).headers.authorization).toBe(`bEaReR  ${token}`);
    const codes = [first.status];
    for (let i = 0; i < 3; i++) codes.push((await via(base, "/anything", ip, { headers: [["authorization", `Bearer ${token}`]] })).status);
    expect(codes).toEqual([200, 200, 200, 429]);
    for (const value of spellings(token)) expect((await via(base, "/anything", ip, { headers: [["authorization", value]] })).status, JSON.stringify(value)).toBe(429);
  });

  /** Each value of Authorization answered 400 ambiguous-api-key, and none reaches the origin. */
  async function refusedAsAmbiguous(values: readonly string[]) {
    const before = originHits();
    for (const value of values) {
      const res = await via(base, "/anything", freshIpv4(), { headers: [["authorization", value]] });
      expect(res.status, value).toBe(400);
      expect(JSON.parse(res.body)).toMatchObject({ type: "urn:slidegate:ambiguous-api-key" });
    }
    expect(originHits()).toBe(before);
  }

  it("more than a scheme and a token is refused, never a new identity: an origin may read the first word after the scheme", async () => {
    await refusedAsAmbiguous([`Bearer ${denied} x`, `Bearer ${denied}  ${denied}`, `x Bearer ${denied}`]);
  });

  // Rails' token authentication (ActionController::HttpAuthentication::Token, for Token and
  // Bearer) splits what follows the scheme at ",", ";" and tab, takes the first part as
  // token=<value> (prefixing "token=" when it is missing) and drops a quote from either end of
  // the value: each of these is the token to it
  const railsSpellings = (token: string) => [`Token token="${token}"`, `Bearer token=${token}`, `Bearer "${token}"`, `Bearer token="${token}`];

  it("a deny-listed token never reaches the origin as Rails' token parameter, quoted or not", async () => {
    const before = originHits();
    for (const value of railsSpellings(denied)) expect((await via(base, "/anything", freshIpv4(), { headers: [["authorization", value]] })).status, value).toBe(403);
    expect(originHits()).toBe(before);
  });

  it("a token with a ; is refused, never a new identity: Rails reads the token before it", async () => {
    await refusedAsAmbiguous([`Bearer ${denied};x`, `Bearer ${denied};`, `Bearer ;${denied}`, `Token token="${denied}";nonce="1"`]);
  });

  it("a token that spent its quota gets none as Rails' token parameter", async () => {
    const token = `auth-rails-${crypto.randomUUID()}`;
    const ip = freshIpv4();
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await via(base, "/anything", ip, { headers: [["authorization", `Bearer ${token}`]] })).status);
    expect(codes).toEqual([200, 200, 200, 429]);
    for (const value of railsSpellings(token)) expect((await via(base, "/anything", ip, { headers: [["authorization", value]] })).status, value).toBe(429);
  });

  it("Basic credentials in another base64 spelling are refused, never a new identity: lenient decoders read them as the same credentials", async () => {
    // "sk_live_<uuid>:" as curl -u sends it; Node, Python and Ruby decoders skip characters
    // outside the alphabet and ignore the bits past the last byte
    const credentials = btoa(`sk_live_${crypto.randomUUID().replaceAll("-", "")}:`);
    expect(credentials.endsWith("=")).toBe(true);
    expect((await blockKey(credentials)).status).toBe(200);
    expect((await via(base, "/anything", freshIpv4(), { headers: [["authorization", `Basic ${credentials}`]] })).status).toBe(403);
    const last = credentials.at(-2)!;
    const bits = String.fromCharCode(last.charCodeAt(0) + 1);
    await refusedAsAmbiguous([
      `Basic ${credentials.slice(0, 4)}.${credentials.slice(4)}`,
      `Basic ${credentials.replace(/=+$/, "")}`,
      `Basic ${credentials}=`,
      `Basic ${credentials.slice(0, -2)}${bits}=`,
    ]);
  });

  it("the admin API names the token bare or as the header carries it", async () => {
    const bare = `auth-bare-${crypto.randomUUID()}`;
    const whole = `auth-whole-${crypto.randomUUID()}`;
    expect((await blockKey(bare)).status).toBe(200);
    expect((await blockKey(`bearer  ${whole}`)).status).toBe(200);
    for (const token of [bare, whole]) {
      for (const value of spellings(token)) expect((await via(base, "/anything", freshIpv4(), { headers: [["authorization", value]] })).status, JSON.stringify(value)).toBe(403);
    }
    const three = await blockKey(`Bearer ${bare} x`);
    expect(three.status).toBe(400);
    expect(((await three.json()) as { detail: string }).detail).toMatch(/^"key" /);
  });
});

describe("IP addresses: one caller, one bucket", () => {
  let base: string;
  let wide: string;
  beforeAll(async () => {
    [base, wide] = await Promise.all([gate({ rules: [{ name: "m", limit: 2, window: "10m" }] }), gate({ ipv6Prefix: 48, rules: [{ name: "m", limit: 2, window: "10m" }] })]);
  });

  it("every address of one IPv6 /64 shares one bucket (the default prefix)", async () => {
    const p = freshPrefix();
    const codes = [];
    for (const ip of [`${p}:1::1`, `${p}:1:ffff:ffff:ffff:fffe`, `${p}:1:8000::42`]) codes.push((await via(base, "/", ip)).status);
    expect(codes).toEqual([200, 200, 429]);
    expect((await via(base, "/", `${p}:2::1`)).status).toBe(200); // the next /64: another caller
  });

  it("ipv6Prefix: 48 counts a whole /48 as one caller", async () => {
    const p = freshPrefix();
    const codes = [];
    for (const ip of [`${p}:1::1`, `${p}:2::1`, `${p}:ffff::1`]) codes.push((await via(wide, "/", ip)).status);
    expect(codes).toEqual([200, 200, 429]);
  });

  it("an address of a transition range is the IPv4 caller it is made from: 6to4's /48, Teredo and NAT64", async () => {
    const hex = (ip: string) => {
      const [a, b, c, d] = ip.split(".").map(Number) as [number, number, number, number];
      return [((a << 8) | b).toString(16), ((c << 8) | d).toString(16)];
    };
    const inverted = (ip: string) =>
      hex(
        ip
          .split(".")
          .map((n) => String(Number(n) ^ 0xff))
          .join("."),
      );
    // 6to4: the 2^16 networks of a /64 in 2002:V4ADDR::/48 are one site behind one IPv4 address
    const site = freshIpv4();
    const [hi, lo] = hex(site);
    const codes = [];
    for (const ip of [`2002:${hi}:${lo}:1::1`, `2002:${hi}:${lo}:ffff::2`, site]) codes.push((await via(base, "/", ip)).status);
    expect(codes, site).toEqual([200, 200, 429]);
    // Teredo: the client behind its NAT (inverted in the last 32 bits), whatever its port; one
    // Teredo server's clients are not one caller
    const [client, neighbour] = [freshIpv4(), freshIpv4()];
    const teredo = (ip: string, port: string) => `2001:0:4136:e378:8000:${port}:${inverted(ip).join(":")}`;
    codes.length = 0;
    for (const ip of [teredo(client, "63bf"), teredo(neighbour, "63bf"), teredo(client, "1234"), client]) codes.push((await via(base, "/", ip)).status);
    expect(codes, client).toEqual([200, 200, 200, 429]);
    // NAT64's prefix spells an IPv4 client translated to IPv6: that client, not every translated one
    const [one, other] = [freshIpv4(), freshIpv4()];
    codes.length = 0;
    for (const ip of [`64:ff9b::${one}`, `64:ff9b::${other}`, `64:ff9b::${hex(one).join(":")}`]) codes.push((await via(base, "/", ip)).status);
    expect(codes, one).toEqual([200, 200, 200]);
    expect((await via(base, "/", one)).status).toBe(429);
  });

  // Spellings of one address: IPv4 plain or IPv4-mapped (dotted or hex), IPv6 compressed, expanded, upper case.
  const pad4 = (h: string) => h.padStart(4, "0");
  const spellingsOf = (address: { v4: number[] } | { v6: number[] }): string[] => {
    if ("v4" in address) {
      const [a, b, c, d] = address.v4 as [number, number, number, number];
      const hi = ((a << 8) | b).toString(16);
      const lo = ((c << 8) | d).toString(16);
      return [
        `${a}.${b}.${c}.${d}`,
        `::ffff:${a}.${b}.${c}.${d}`,
        `::FFFF:${a}.${b}.${c}.${d}`,
        `::ffff:${hi}:${lo}`,
        `0:0:0:0:0:ffff:${pad4(hi)}:${pad4(lo)}`,
        `0000:0000:0000:0000:0000:FFFF:${a}.${b}.${c}.${d}`,
      ];
    }
    const groups = address.v6.map((g) => g.toString(16));
    const full = groups.map(pad4).join(":");
    return [full, full.toUpperCase(), groups.join(":"), groups.join(":").toUpperCase(), `${groups.slice(0, 4).join(":")}:${groups.slice(4).map(pad4).join(":")}`];
  };
  // each run (and each shrink) takes an address no other run used: the spelling is what varies
  const address = fc.oneof(
    fc.constant(() => ({ v4: freshIpv4().split(".").map(Number) })),
    fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 4, maxLength: 4 }).map((low) => () => ({ v6: [0x2001, 0xdb8, ++next & 0xffff, 0xa, ...low] })),
  );

  it("every spelling of one address is one bucket (fast-check)", async () => {
    await fc.assert(
      fc.asyncProperty(address, fc.nat(), fc.nat(), async (make, i, j) => {
        const spellings = spellingsOf(make());
        const first = spellings[i % spellings.length]!;
        const second = spellings[j % spellings.length]!;
        const third = spellings[(i + j + 1) % spellings.length]!;
        const codes = [];
        for (const ip of [first, second, third]) codes.push((await via(base, "/", ip)).status);
        expect(codes, [first, second, third].join(" / ")).toEqual([200, 200, 429]);
      }),
      { numRuns: 80 },
    );
  }, 60_000);

  it("IPv4-mapped allow and deny list entries match their IPv4 clients", async () => {
    const lists = await gate({
      rules: [{ name: "m", limit: 1, window: "10m" }],
      deny: { ips: ["::ffff:198.51.100.0/120"] },
      allow: { ips: ["::ffff:192.0.2.5", "::FFFF:C000:0206"] },
    });
    for (const ip of ["198.51.100.9", "::ffff:198.51.100.10"]) expect((await via(lists, "/", ip)).status, ip).toBe(403);
    for (const ip of ["192.0.2.5", "192.0.2.6"]) {
      const codes = [];
      for (let i = 0; i < 3; i++) codes.push((await via(lists, "/", ip)).status);
      expect(codes, ip).toEqual([200, 200, 200]);
    }
  });

  it("an IPv4 deny entry covers the 6to4, Teredo and NAT64 addresses made from its addresses, the callers they are; an allow entry trusts its IPv4 addresses alone", async () => {
    const lists = await gate({ rules: [{ name: "m", limit: 1, window: "10m" }], deny: { ips: ["198.51.100.0/24"] }, allow: { ips: ["192.0.2.5"] } });
    // 198.51.100.9 as a 6to4 site, a Teredo client (the address inverted in its last 32 bits), NAT64
    for (const ip of ["2002:c633:6409:1::1", "2001:0:4136:e378:8000:63bf:39cc:9bf6", "64:ff9b::198.51.100.9"]) expect((await via(lists, "/", ip)).status, ip).toBe(403);
    // a relay's operator can answer for 192.0.2.5's 6to4 and NAT64 addresses: counted as that
    // caller (one bucket), never trusted as it
    const codes = [];
    for (const ip of ["2002:c000:205:7::1", "2002:c000:205:7::1", "64:ff9b::c000:205"]) codes.push((await via(lists, "/", ip)).status);
    expect(codes).toEqual([200, 429, 429]);
    codes.length = 0;
    for (let i = 0; i < 3; i++) codes.push((await via(lists, "/", "192.0.2.5")).status);
    expect(codes).toEqual([200, 200, 200]);
    // a neighbour of the ranges is no IPv4 caller
    expect((await via(lists, "/", "2003:c633:6409:1::1")).status).toBe(200);
  });
});

describe("made-up API keys buy no fresh quota without bound, in every unknownKeys mode that claims it", () => {
  const ADMIN = "evasion-admin-token-0123456789abcdef";
  const tierRule = { name: "m", limit: 2, window: "10m" };
  const floorRule = { name: "per-address", limit: 3, window: "10m" };
  // What reaches the origin of one caller's flood of made-up keys: the floor's limit, nothing
  // (each is refused as unknown), or the default tier's limit, the caller's as its address. And
  // whether the flood leaves the floor spent for the caller's registered key: a 401 counts
  // against it; under "ip" a made-up key's request is decided with the floor all-or-nothing,
  // so one the tier refuses spends none of it.
  const modes = [
    { unknownKeys: "defaultTier", floor: true, reaches: floorRule.limit, floorSpent: true },
    { unknownKeys: "reject", floor: false, reaches: 0, floorSpent: false },
    { unknownKeys: "reject", floor: true, reaches: 0, floorSpent: true },
    { unknownKeys: "ip", floor: false, reaches: tierRule.limit, floorSpent: false },
    { unknownKeys: "ip", floor: true, reaches: tierRule.limit, floorSpent: false },
  ] as const;
  // one caller each, as the addresses it can send from: one IPv4 address; every address of its
  // IPv6 /64; its 6to4 site, Teredo and NAT64 addresses and the IPv4 address they are made from
  const hex = (ip: string) => {
    const [a, b, c, d] = ip.split(".").map(Number) as [number, number, number, number];
    return [((a << 8) | b).toString(16), ((c << 8) | d).toString(16)];
  };
  const callers: Record<string, () => string[]> = {
    "one IPv4 address": () => [freshIpv4()],
    "one IPv6 /64": () => {
      const p = freshPrefix();
      return Array.from({ length: 8 }, (_, i) => `${p}:7:${(i * 0x1fff).toString(16)}:${i}:${i + 1}:${i + 2}`);
    },
    "one IPv4 host by way of 6to4, Teredo and NAT64": () => {
      const ip = freshIpv4();
      const [hi, lo] = hex(ip);
      const [ti, tl] = hex(
        ip
          .split(".")
          .map((n) => String(Number(n) ^ 0xff))
          .join("."),
      );
      return [ip, `2002:${hi}:${lo}:1::1`, `2002:${hi}:${lo}:ffff::9`, `2001:0:4136:e378:8000:63bf:${ti}:${tl}`, `64:ff9b::${ip}`];
    },
  };

  for (const { unknownKeys, floor, reaches, floorSpent } of modes) {
    const setting = `unknownKeys "${unknownKeys}"${floor ? " with a per-address floor" : ""}`;
    it(`${setting}: a caller's flood of made-up keys reaches the origin ${reaches} times, whatever address of its own it sends from; its registered key ${floorSpent ? "stops at the spent floor" : "keeps its own quota"}`, async () => {
      const base = await gate({ identity: { header: "x-api-key", unknownKeys }, rules: [tierRule], ...(floor ? { addressRules: [floorRule] } : {}) }, { ADMIN_TOKEN: ADMIN });
      const registered = `registered-${crypto.randomUUID()}`;
      const set = await fetch(`${base}__slidegate/keys/set`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, body: JSON.stringify({ key: registered }) });
      expect(set.status).toBe(200);
      for (const [who, addresses] of Object.entries(callers)) {
        const from = addresses();
        const before = originHits();
        const made = (i: number) => via(base, "/anything", from[i % from.length]!, { headers: [["x-api-key", `made-up-${crypto.randomUUID()}`]] });
        // at once (each decision exact under contention), then one after another
        const burst = await Promise.all(Array.from({ length: 12 }, (_, i) => made(i)));
        const after = [];
        for (let i = 0; i < 12; i++) after.push(await made(i));
        expect(originHits() - before, `${setting}, ${who}`).toBe(reaches);
        expect([...burst, ...after].filter((r) => r.status === 200)).toHaveLength(reaches);
        const own = await via(base, "/anything", from[0]!, { headers: [["x-api-key", registered]] });
        expect(own.status, `${setting}, ${who}: the registered key`).toBe(floorSpent ? 429 : 200);
        if (own.status === 200)
          await fetch(`${base}__slidegate/reset`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, body: JSON.stringify({ key: registered }) });
      }
    }, 60_000);
  }
  const originHits = () => origin().hits("echo");
});

describe("shadow rules never change the outcome of a store failure", () => {
  it("a shadow rule that fails closed does not turn a failing store into 503s", async () => {
    const base = await gate(
      {
        fail: "open",
        rules: [
          { name: "real", limit: 5, window: "10m" },
          { name: "trial", limit: 1, window: "10m", shadow: true, fail: "closed" },
        ],
      },
      { UPSTASH_REDIS_REST_TOKEN: `${services().shimToken}-wrong` }, // every store call fails
    );
    const res = await via(base, "/", freshIpv4());
    expect(res.status).toBe(200);
    expect(res.headers["x-slidegate-fail-open"]).toBe("store-unavailable");
  });

  it("shadow rules alone that fail closed admit when the store fails: they never refuse anything", async () => {
    for (const config of [
      { shadow: true, fail: "closed", rules: [{ name: "trial", limit: 1, window: "10m" }] },
      { rules: [{ name: "trial", limit: 1, window: "10m", shadow: true, fail: "closed" }] },
    ]) {
      const base = await gate(config, { UPSTASH_REDIS_REST_TOKEN: `${services().shimToken}-wrong` }); // every store call fails
      const res = await via(base, "/", freshIpv4());
      expect(res.status, JSON.stringify(config)).toBe(200);
    }
  });

  it("a shadow rule's short timeout does not make the enforced rules fail open", async () => {
    // the slow shim answers every call slowShimMs late: past the shadow rule's 1 ms, well within 10 s
    const base = await gate(
      {
        rules: [
          { name: "real", limit: 1, window: "10m", timeout: 10_000 },
          { name: "trial", limit: 5, window: "10m", shadow: true, timeout: 1 },
        ],
      },
      { UPSTASH_REDIS_REST_URL: services().slowShimUrl },
    );
    const ip = freshIpv4();
    const first = await via(base, "/", ip);
    const second = await via(base, "/", ip);
    expect([first.status, second.status]).toEqual([200, 429]);
    expect(first.headers["x-slidegate-fail-open"]).toBeUndefined();
  });

  it("a shadow address rule whose own call times out does not mark an API key's admission as failed open", async () => {
    // the key's call and the address's are two calls: the slow shim fails the shadow one alone (1 ms), the key's meets its 10 s
    const base = await gate(
      {
        identity: { header: "x-api-key" },
        rules: [{ name: "real", limit: 1, window: "10m", timeout: 10_000 }],
        addressRules: [{ name: "trial", limit: 5, window: "10m", shadow: true, timeout: 1 }],
      },
      { UPSTASH_REDIS_REST_URL: services().slowShimUrl },
    );
    const ip = freshIpv4();
    const key: [string, string] = ["x-api-key", `key-${ip}`];
    const first = await via(base, "/", ip, { headers: [key] });
    const second = await via(base, "/", ip, { headers: [key] });
    expect([first.status, second.status]).toEqual([200, 429]);
    expect(first.headers["x-slidegate-fail-open"]).toBeUndefined();
    expect(first.headers["ratelimit-policy"] ?? first.headers["x-ratelimit-limit"]).toBeDefined();
  });
});
