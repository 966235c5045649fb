import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ANY_METHOD, canonicalPath, methodsOf } from "./canonical.ts";

const path = (p: string) => {
  const c = canonicalPath(p);
  if (!c.ok) throw new Error(`refused: ${c.refused}`);
  return c;
};

describe("canonicalPath", () => {
  it("decodes escaped unreserved characters and upper-cases the other escapes (RFC 3986 §6.2.2)", () => {
    expect(path("/%76%31/%75sers").path).toBe("/v1/users");
    expect(path("/a%7e%2d%2E%5f").path).toBe("/a~-._");
    expect(path("/caf%c3%a9/%20x").path).toBe("/caf%C3%A9/%20x");
    expect(path("/100%/%zz").path).toBe("/100%25/%25zz"); // not escapes: literal "%"s, written as such
  });

  it("merges runs of slashes and resolves dot segments, escaped dots included", () => {
    expect(path("//v1///users").path).toBe("/v1/users");
    expect(path("/a/./b/../c").path).toBe("/a/c");
    expect(path("/a/%2e%2E/b").path).toBe("/b");
    expect(path("/../../x").path).toBe("/x");
    expect(path("/a/b/..").path).toBe("/a/");
    expect(path("/a/").path).toBe("/a/");
    expect(path("/").path).toBe("/");
    expect(path("").path).toBe("/");
  });

  it("matches on the path as forwarded, fully decoded, without ; parameters and without a trailing slash", () => {
    expect(path("/V1;x/users/").matchOn).toEqual(["/V1;x/users/", "/V1;x/users", "/V1/users/", "/V1/users", "/V1", "/V1/"]); // the last two: cut at the ";"
    expect(path("/a%3Bb/c").matchOn).toContain("/a/c"); // an escaped ";" decoded, as some origins do
    expect(path("/public/..;/v1/users").matchOn).toContain("/v1/users"); // "..;" is ".." to a servlet container
    expect(path("/files/my%20file").matchOn).toContain("/files/my file");
    expect(path("/%2576%2531/users").matchOn).toContain("/v1/users"); // decoded twice, as a proxy and an app might
    expect(path("/v1%252Fusers").matchOn).toContain("/v1/users");
  });

  it("matches a backslash the path decodes to twice as a slash too: IIS behind a proxy that decodes once reads it so", () => {
    expect(path("/x/..%255C..%255Cv1/users").matchOn).toEqual(expect.arrayContaining(["/x/..\\..\\v1/users", "/v1/users", "/v1/users/"]));
    expect(path("/v1%255cusers%255c").matchOn).toContain("/v1/users/");
    // a path that decodes to none is matched as before
    expect(path("/v1%255Fusers").matchOn).not.toContain("/v1/users");
  });

  it("matches without a format suffix or trailing dots, and with a trailing slash added, as lenient routers do", () => {
    expect(path("/v1/users.json").matchOn).toEqual(["/v1/users.json", "/v1/users.json/", "/v1/users", "/v1/users/"]);
    expect(path("/v1/users.").matchOn).toContain("/v1/users");
    expect(path("/v1./users/").matchOn).toContain("/v1/users/");
    expect(path("/v1").matchOn).toEqual(["/v1", "/v1/"]);
    expect(path("/").matchOn).toEqual(["/"]);
    expect(path("/.json").matchOn).toContain("/.json"); // a name that is all suffix is a name
    expect(path("/login.tar.gz").matchOn).toContain("/login");
    expect(path("/login.a-b").matchOn).toContain("/login");
  });

  it("matches a decoded path cut at its first ? or #, as a rewrite that puts the decoded path back into a URL routes it", () => {
    // Apache mod_rewrite (RewriteRule ^(.*)$ index.php/$1) and nginx (proxy_pass with a variable)
    // put the decoded path into a new URL, where an escaped "?" or "#" ends the path
    expect(path("/v1/users%3Fx").matchOn).toContain("/v1/users");
    expect(path("/v1/users%3F").matchOn).toContain("/v1/users");
    expect(path("/v1/users%23x/y").matchOn).toContain("/v1/users");
    expect(path("/v1/users%253Fx").matchOn).toContain("/v1/users"); // decoded twice
    expect(path("/v1/users%3Fx").path).toBe("/v1/users%3Fx"); // what the origin receives is unchanged
    // ";" too, which Fastify 4 reads as the query's start (useSemicolonDelimiter)
    expect(path("/v1/users;x/y").matchOn).toContain("/v1/users");
  });

  it("matches each segment without the spaces and control characters around it, and without trailing dots and spaces", () => {
    // Windows drops trailing dots and spaces from a name (IIS); Spring's trimTokens trims each
    // segment as Java's String.trim does, every character up to U+0020 at either end
    expect(path("/v1/users%20").matchOn).toContain("/v1/users");
    expect(path("/v1/users.%20.").matchOn).toContain("/v1/users");
    expect(path("/v1/%20users%09/").matchOn).toContain("/v1/users/");
    expect(path("/v1%20/users").matchOn).toContain("/v1/users");
    expect(path("/index.php%20").matchOn).toContain("/index.php");
    expect(path("/v1/%20/users").matchOn).toContain("/v1/users");
  });

  it("matches without a script's segment that more path follows, as a front controller routes its PATH_INFO", () => {
    // Symfony and Laravel route /index.php/api/login as /api/login, CodeIgniter and CGI apps alike
    expect(path("/index.php/api/login").matchOn).toContain("/api/login");
    expect(path("/app/index.php/api/login").matchOn).toContain("/app/api/login");
    expect(path("/index.php;x/api/login").matchOn).toContain("/api/login");
    expect(path("/index.php%20/api/login").matchOn).toContain("/api/login");
    expect(path("/api/v1.2/users").matchOn).not.toContain("/api/users"); // a version, not a file
    expect(path("/users/john.doe/profile").matchOn).not.toContain("/users/profile"); // a name with a dot, not a script
    expect(path("/INDEX.PHP./api/login").matchOn).toContain("/api/login"); // IIS: any case, trailing dots
    expect(path("/api/login.json").matchOn).not.toContain("/api"); // the last segment is the file itself
  });

  it("matches without ASP.NET's cookieless session data, which the .NET Framework strips with the slash before it", () => {
    // /(S(x))/v1/users and /v1/us/(S(x))ers are /v1/users to ASP.NET: a name split by one is whole again
    expect(path("/(S(abc))/v1/users").matchOn).toContain("/v1/users");
    expect(path("/(A(a)S(b)F(c))/v1/users").matchOn).toContain("/v1/users");
    expect(path("/ad/(S(x))min/x").matchOn).toContain("/admin/x");
    expect(path("/%28S%28x%29%29/v1/users").matchOn).toContain("/v1/users");
    expect(path("/(S(x))/index.php/v1/users").matchOn).toContain("/v1/users");
    expect(path("/v1/(users)").matchOn).not.toContain("/v1"); // parentheses alone are a name
    expect(path("/(S(x))/v1").matchOn[0]).toBe("/(S(x))/v1"); // the path as forwarded first, as ever
  });

  it("matches a directory's index script, or a controller's index action, as the directory, which servers run it for", () => {
    // Apache's DirectoryIndex, nginx's index, IIS's default documents, Tomcat's welcome files
    expect(path("/v1/users/index.php").matchOn).toEqual(expect.arrayContaining(["/v1/users/", "/v1/users"]));
    expect(path("/index.php").matchOn).toContain("/");
    expect(path("/V1/Default.ASPX.").matchOn).toContain("/V1/");
    expect(path("/v1/index.jsp;jsessionid=1").matchOn).toContain("/v1/");
    expect(path("/v1/index.html").matchOn).not.toContain("/v1/"); // a page, not a script that a rule's handler is
    expect(path("/v1/reindex.php").matchOn).not.toContain("/v1/");
    // a controller's default action: ASP.NET MVC's {action=Index}, CakePHP, CodeIgniter, Yii
    expect(path("/v1/users/Index").matchOn).toEqual(expect.arrayContaining(["/v1/users/", "/v1/users"]));
    expect(path("/index").matchOn).toContain("/");
    expect(path("/v1/reindex").matchOn).not.toContain("/v1/");
    expect(path("/v1/*/index").matchOn).not.toContain("/v1/*/"); // a glob's wildcard before it: every path beneath
  });

  it("matches a Next.js data route or segment prefetch as the page Next.js routes it to", () => {
    // NextDataPathnameNormalizer: /_next/data/<build id>/<page>.json runs <page>'s getServerSideProps
    expect(path("/_next/data/b1d/v1/users.json").matchOn).toContain("/v1/users");
    expect(path("/_next/data/b1d/index.json").matchOn).toContain("/"); // /index is the home page
    expect(path("/_next/data/b1d/index/x.json").matchOn).toContain("/x");
    expect(path("/_next/data/v1/users.json").matchOn).toContain("/v1/users"); // a deployment ID: no build ID
    expect(path("/docs/_next/data/b1d/v1/users.json").matchOn).toContain("/docs/v1/users"); // behind a basePath
    expect(path("/_next/data/b1d/v1/users").matchOn).not.toContain("/v1/users"); // a data route ends in .json
    // SegmentPrefixRSCPathnameNormalizer: <page>.segments/<segment path>.segment.rsc renders <page>
    expect(path("/v1/users.segments/_tree.segment.rsc").matchOn).toContain("/v1/users");
    expect(path("/v1/users.segments/$c$children/__PAGE__.segment.rsc").matchOn).toContain("/v1/users");
    expect(path("/v1/users.segments/_tree").matchOn).not.toContain("/v1/users");
    // a glob cut to wildcards alone keeps its spelling: it never meant every path
    expect(path("/_next/data/*.json").matchOn).not.toContain("/*");
  });

  it("matches a SvelteKit, React Router, Nuxt, Gatsby or Qwik City data request as the page it runs the server load functions, loaders or data fetching of", () => {
    expect(path("/search/__data.json").matchOn).toEqual(expect.arrayContaining(["/search", "/search/"]));
    const pages: [sent: string, page: string][] = [
      // SvelteKit's strip_data_suffix: <page>/__data.json is <page>, /__data.json is /
      ["/__data.json", "/"],
      // React Router's getNormalizedPath: /_root.data is the home page (behind a basename too), <page>/_.data is <page>/
      ["/_root.data", "/"],
      ["/app/_root.data", "/app"],
      ["/search/_.data", "/search"],
      // Nuxt's renderer renders <page>/_payload.json (or .js) as <page>, for its payload
      ["/search/_payload.json", "/search"],
      ["/_payload.js", "/"],
      // Gatsby's server runs an SSR page's getServerData for /page-data/<page>/page-data.json (index: /), behind a path prefix too
      ["/page-data/search/page-data.json", "/search"],
      ["/page-data/index/page-data.json", "/"],
      ["/blog/page-data/v1/users/page-data.json", "/blog/v1/users"],
      // Qwik City's getRouteMatchPathname: <page>/q-data.json runs <page>'s route loaders
      ["/search/q-data.json", "/search"],
      ["/q-data.json", "/"],
    ];
    for (const [sent, page] of pages) expect(path(sent).matchOn, sent).toContain(page);
    expect(path("/search/data.json").matchOn).not.toContain("/search");
    // a glob cut to wildcards alone keeps its spelling: it never meant every path
    expect(path("/*/__data.json").matchOn).not.toContain("/*/");
    expect(path("/page-data/*/page-data.json").matchOn).not.toContain("/*");
  });

  it("works out a path of long runs of dots in time linear in its length", () => {
    // a regex such as /\.+$/ tries every start in a run of dots: 16 KB of them took over a second
    const started = performance.now();
    for (const p of [`/${".".repeat(65_536)}a`, `/${"a.".repeat(32_768)}!`, `/x${".".repeat(65_536)}/y`]) expect(canonicalPath(p).ok).toBe(true);
    expect(performance.now() - started).toBeLessThan(2000); // linear: a few ms; quadratic: tens of seconds
  });

  it("remembers a path's forms only while they are few: a flood of distinct crafted paths holds a bounded memory", () => {
    // a path of 511 characters crafted for some two hundred forms holds 100 KB of them: 1,024
    // remembered were 58 MB of an isolate's 128, six times what a path held before its forms grew
    const crafted = `/%2528S%2528x%2529%2529/z.php./${"a".repeat(200)}/%25%20/(S(x))..%25%2528S%2528x%2529%25292%A25208S%25./%2328%3Bx%25/29..%292y./5..%25233%252%25;p2%2520%25y.2z%3B.;p/php.52e%252e%253(S(x))Bz.php./53B%2523/%252%25b.json`;
    const c = canonicalPath(crafted);
    expect(c.ok && c.matchOn.join("").length).toBeGreaterThan(30_000);
    expect(canonicalPath(crafted)).not.toBe(c); // worked out again: a few passes over 511 characters
    expect(canonicalPath(crafted)).toEqual(c);
    expect(canonicalPath("/v1/users.json")).toBe(canonicalPath("/v1/users.json")); // a common path is remembered
  });

  it("refuses escapes only some decoders accept: overlong UTF-8 and %u", () => {
    for (const p of ["/a%C0%AFb", "/a%c1%9c", "/%E0%80%AE%E0%80%AE/x", "/%F0%80%80%AF", "/a%F8%80%80%80%AFb", "/a%fc%80%80%80%80%af", "/a%u002Fb", "/a%U005c"]) {
      const c = canonicalPath(p);
      expect(c.ok, p).toBe(false);
      if (!c.ok) expect(c.refused, p).toMatch(/^an ambiguous escape/);
    }
    expect(canonicalPath("/caf%C3%A9/%E2%82%AC/%F0%9F%98%80").ok).toBe(true); // valid UTF-8 passes
    expect(canonicalPath("/m%FCnchen/%F8l").ok).toBe(true); // and Latin-1 ü and ø
    // and what starts like a five- or six-byte sequence but is none: cp1252 "ø…", GBK 鴨 and 鼈
    for (const p of ["/%F8%85", "/%F8%86/x", "/%FC%82%C4%E3", "/%F8%80%80%80"]) expect(canonicalPath(p).ok, p).toBe(true);
  });

  it("writes a % that starts no escape as %25, so what is decoded after it cannot make a new escape", () => {
    // "%%32%46" would reach the origin as "%2F", an encoded slash the gate refuses when sent as such
    expect(path("/v1%%32%46users")).toMatchObject({ path: "/v1%252Fusers", matchOn: expect.arrayContaining(["/v1%2Fusers", "/v1/users"]) });
    expect(path("/%%30a").path).toBe("/%250a");
    expect(path("/100%").path).toBe("/100%25");
    expect(path("/a%2").path).toBe("/a%252");
    expect(path("/a%25b").path).toBe("/a%25b"); // an escaped % stays as it is
  });

  it("refuses an encoded slash, backslash or NUL, and a raw backslash", () => {
    for (const [p, refused] of [
      ["/a%2Fb", "an encoded slash (%2F)"],
      ["/a%2fb", "an encoded slash (%2F)"],
      ["/a%5cb", "an encoded backslash (%5C)"],
      ["/a%00", "an encoded NUL (%00)"],
      ["/a\\b", "a backslash"],
    ]) {
      expect(canonicalPath(p!), p).toEqual({ ok: false, refused });
    }
  });

  // with what the match forms cut at, trim, fold and drop: ? # ; spaces, (S(…)), scripts, İ
  const segment = fc.oneof(
    fc.stringMatching(/^[A-Za-z0-9._~;=%-]{0,12}$/, { size: "max" }),
    fc
      .array(
        fc.constantFrom(
          "a",
          "A",
          ".",
          ";",
          "%",
          "?",
          "#",
          " ",
          "(S(x))",
          "%28S%28x%29%29",
          ".php",
          ".json",
          "%3F",
          "%23",
          "%3B",
          "%20",
          "%2520",
          "%2e",
          "%C4%B0",
          "İ",
          "%F8",
          "%FC",
          "%80",
          "%8",
        ),
        { maxLength: 6 },
      )
      .map((a) => a.join("")),
  );
  const anyPath = fc.array(segment, { maxLength: 8 }).map((s) => `/${s.join("/")}`);

  it("is idempotent, and what it forwards has no empty, . or .. segment (fast-check)", () => {
    fc.assert(
      fc.property(anyPath, (p) => {
        const c = canonicalPath(p);
        if (!c.ok) return;
        // what it forwards is worked out again to itself, matched in the same forms
        expect(canonicalPath(c.path)).toEqual(c);
        expect(c.path).not.toMatch(/\/\/|\/\.\.?(\/|$)/);
        expect(c.matchOn[0]).toBe(c.path);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("methodsOf", () => {
  const methods = (method: string, headers: Record<string, string> = {}, url = "https://x/") => methodsOf(new Request(url, { method, headers }), new URL(url));

  it("counts HEAD as GET, and an override header or _method as the method it names", () => {
    expect(methods("HEAD")).toEqual(["HEAD", "GET"]);
    expect(methods("GET")).toEqual(["GET"]);
    expect(methods("POST", { "x-http-method-override": "delete" })).toEqual(["POST", "DELETE"]);
    expect(methods("POST", { "x-http-method": "PUT", "x-method-override": "PATCH" })).toEqual(["POST", "PUT", "PATCH"]);
    // each header on its own: PUT and PATCH name each other, so the pair above cannot tell one missing
    expect(methods("POST", { "x-http-method": "DELETE" })).toEqual(["POST", "DELETE"]);
    expect(methods("POST", { "x-method-override": "DELETE" })).toEqual(["POST", "DELETE"]);
    expect(methods("POST", {}, "https://x/?_method=head")).toEqual(["POST", "HEAD", "GET"]);
  });

  it("counts PUT as PATCH and PATCH as PUT: Rails' and Laravel's resource routes send both to one update action", () => {
    expect(methods("PUT")).toEqual(["PUT", "PATCH"]);
    expect(methods("PATCH")).toEqual(["PATCH", "PUT"]);
    expect(methods("POST", { "x-http-method-override": "PUT" })).toEqual(["POST", "PUT", "PATCH"]);
  });

  it("counts a request whose body may name a method as any method: a POST with a body, a form with any method but GET, HEAD included", () => {
    const withBody = (method: string, headers: Record<string, string> = {}) =>
      methodsOf(new Request("https://x/", { method, headers, body: "_method=DELETE" }), new URL("https://x/"));
    expect(withBody("POST", { "content-type": "application/json" })).toEqual(["POST", ANY_METHOD]);
    expect(withBody("POST")).toEqual(["POST", ANY_METHOD]);
    expect(methods("POST")).toEqual(["POST"]); // no body: nothing to name a method in
    expect(methods("PUT", { "content-type": " Multipart/Mixed; boundary=x" })).toEqual(["PUT", "PATCH", ANY_METHOD]);
    expect(methods("PATCH", { "content-type": "application/x-www-form-urlencoded" })).toEqual(["PATCH", "PUT", ANY_METHOD]);
    expect(withBody("PUT", { "content-type": "application/json" })).toEqual(["PUT", "PATCH"]);
    // Hono's method override reads a HEAD's form, which a Worker origin receives; a GET's it passes over
    expect(methods("HEAD", { "content-type": "application/x-www-form-urlencoded" })).toEqual(["HEAD", "GET", ANY_METHOD]);
    expect(methods("GET", { "content-type": "multipart/form-data; boundary=x" })).toEqual(["GET"]);
  });

  it("counts a POST that declares Content-Length 0 but is chunked as any method: the chunked body is what the origin reads, and it may name one", () => {
    const post = (headers: Record<string, string>) => methodsOf(new Request("https://x/", { method: "POST", headers, body: "_method=DELETE" }), new URL("https://x/"));
    expect(post({ "content-length": "0", "transfer-encoding": "chunked" })).toEqual(["POST", ANY_METHOD]);
    expect(post({ "content-length": " 0 " })).toEqual(["POST"]);
  });

  it("reads _method in the query as PHP names parameters too", () => {
    expect(methods("POST", {}, "https://x/?.method=delete")).toEqual(["POST", "DELETE"]);
    expect(methods("POST", {}, "https://x/?%20_method=put&x=1")).toEqual(["POST", "PUT", "PATCH"]);
    expect(methods("POST", {}, "https://x/?%5Fmethod=patch")).toEqual(["POST", "PATCH", "PUT"]);
    // a name with escaped letters is the same name to every framework that reads the query
    expect(methods("POST", {}, "https://x/?_%6Dethod=delete")).toEqual(["POST", "DELETE"]);
    expect(methods("POST", {}, "https://x/?%5F%6D%65%74%68%6F%64=delete")).toEqual(["POST", "DELETE"]);
    expect(methods("POST", {}, "https://x/?methods=x")).toEqual(["POST"]);
    // Express's method-override takes "LOC\u212A" (it lower-cases to "lock") and its router reads it as LOCK
    expect(methods("POST", {}, "https://x/?_method=LOC%E2%84%AA")).toEqual(["POST", "LOC\u212A", "LOCK"]);
    // PHP ends a name at a NUL: "_method\0x" is $_GET['_method']
    expect(methods("POST", {}, "https://x/?_method%00x=delete")).toEqual(["POST", "DELETE"]);
    expect(methods("POST", {}, "https://x/?x%00_method=delete")).toEqual(["POST"]);
  });
});
