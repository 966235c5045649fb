import { describe, expect, it } from "vitest";
import { canonicalPath } from "./canonical.ts";
import { matchPaths } from "./query-routes.ts";

const own = (pathname: string) => {
  const c = canonicalPath(pathname);
  if (!c.ok) throw new Error(`refused: ${c.refused}`);
  return c.matchOn;
};
/** The forms a request for `target` is matched on: its path's, and those of the path its query routes to. */
const on = (target: string) => {
  const url = new URL(`https://x${target}`);
  return matchPaths(url.search, own(url.pathname));
};

describe("matchPaths", () => {
  it("adds the path a front script's ?q=, ?r= or ?/path routes to, and WordPress's ?rest_route= on any path, to the path's own forms", () => {
    expect(on("/?q=user/login")).toEqual(["/", "/user/login", "/user/login/"]); // Drupal 7
    expect(on("/index.php?r=site/login")).toEqual([...own("/index.php"), "/site/login", "/site/login/"]); // Yii
    expect(on("/?/site/login")).toContain("/site/login"); // CodeIgniter 3
    expect(on("/index.php?/site/login?x=1")).toContain("/site/login");
    expect(on("/?/site/login&x=1")).toContain("/site/login");
    // WordPress: the REST route behind /wp-json, and the route itself
    expect(on("/?rest_route=/wp/v2/users")).toEqual(["/", "/wp-json/wp/v2/users", "/wp-json/wp/v2/users/", "/wp/v2/users", "/wp/v2/users/"]);
    expect(on("/blog/hello-world/?rest_route=/wp/v2/users")).toContain("/wp-json/wp/v2/users"); // WordPress reads it on any path
    expect(on("/?x=1&q=user/login&y=2")).toContain("/user/login");
  });

  it("routes only on the front script, / and the paths canonicalPath folds into it, for ?q=, ?r= and ?/path", () => {
    for (const front of ["/", "/index.php", "/index.php/", "/INDEX.PHP.", "//", "/index", "/;x"]) expect(on(`${front}?q=user/login`), front).toContain("/user/login");
    for (const elsewhere of ["/search", "/v1/index.php/x", "/node/1", "/v1/"]) {
      const forms = own(elsewhere);
      expect(matchPaths("?q=user/login&r=site/login", forms), elsewhere).toBe(forms);
      expect(matchPaths("?/site/login", forms), elsewhere).toBe(forms);
    }
  });

  it("routes ?q= and ?r= on the front script with more path after it, which runs it with PATH_INFO: Drupal 7 and Yii read the parameter whatever that holds", () => {
    for (const front of ["/index.php/x", "/index.php/v1/users", "/INDEX.PHP/x", "/index.php./x", "/index.php;x/x", "/%69ndex.php/x", "//index.php//x/"]) {
      expect(on(`${front}?q=user/login`), front).toContain("/user/login");
      expect(on(`${front}?r=site/login`), front).toContain("/site/login");
    }
    // not a script beneath another directory, nor a name that merely starts like one
    for (const elsewhere of ["/v1/index.php/x", "/index.phpx/x", "/indexes/x", "/x/index.php"]) {
      const forms = own(elsewhere);
      expect(matchPaths("?q=user/login", forms), elsewhere).not.toContain("/user/login");
    }
  });

  it("reads parameter names as PHP registers them: escaped, leading spaces dropped, . space and [ as _, cut at a NUL", () => {
    for (const query of ["?%71=user/login", "?+q=user/login", "?%20%20q=user/login", "?q%00x=user/login", "?%72=user/login"])
      expect(on(`/${query}`), query).toContain("/user/login");
    for (const name of ["rest.route", "rest+route", "rest%20route", "rest[route", "%72est_route", "rest%5Froute", "+rest_route", "rest_route%00.x"])
      expect(on(`/?${name}=/wp/v2/users`), name).toContain("/wp-json/wp/v2/users");
    // other names: PHP's names are case-sensitive, q[] is an array, a NUL before the name ends it
    for (const query of ["?Q=user/login", "?qq=user/login", "?q[]=user/login", "?x%00q=user/login", "?R=user/login", "?rest_routes=/user/login", "?q_=user/login"])
      expect(on(`/${query}`), query).toEqual(["/"]);
  });

  it("decodes the value once, as PHP does, and matches it in every canonical form a path has", () => {
    expect(on("/?rest_route=/wp/v2/%75sers")).toContain("/wp-json/wp/v2/users");
    expect(on("/?rest_route=%2Fwp%2Fv2%2Fusers")).toContain("/wp-json/wp/v2/users");
    expect(on("/?rest_route=/wp/v2/%2575sers")).toContain("/wp-json/wp/v2/users"); // decoded twice, as the path is
    expect(on("/?rest_route=wp/v2/users")).toContain("/wp-json/wp/v2/users"); // no leading slash
    expect(on("/?q=/user//./login/")).toContain("/user/login");
    expect(on("/?q=user+login")).toContain("/user login");
    expect(on("/?q=user/login.json")).toContain("/user/login");
    expect(on("/?q=user/login%3Fx")).toContain("/user/login");
  });

  it("matches a routed value's dot segments as the applications read them, unresolved: with them dropped as well as resolved", () => {
    // the query reaches the origin as sent: CodeIgniter 3 drops `..` segments (_remove_relative_directory),
    // Drupal 7 routes by the longest registered prefix (user/login/../.. is user/login), WordPress
    // matches its route patterns against the literal value
    expect(on("/?/site/login/../..")).toContain("/site/login");
    expect(on("/?q=user/login/../..")).toContain("/user/login");
    expect(on("/?q=user/login/%2E%2E/%2e.")).toContain("/user/login"); // escaped, as canonicalPath decodes them
    expect(on("/?q=user/login/%252E%252E/..")).toContain("/user/login");
    expect(on("/?r=site/login/./..")).toContain("/site/login");
    expect(on("/?rest_route=/wp/v2/global-styles/themes/x/../../../../y")).toContain("/wp-json/wp/v2/global-styles/themes/x/y");
    // and resolved too
    expect(on("/?q=x/../user/login")).toContain("/user/login");
    expect(on("/?q=user/login/../..")).toContain("/");
    // both are worked out, so both count towards the 2,048 characters
    expect(on(`/?q=${"a".repeat(1000)}/../b`)).toContain(`/${"a".repeat(1000)}/b`);
    expect(on(`/?q=${"a".repeat(1100)}/../b`)).toBeUndefined();
  });

  it("takes every value of a repeated name, so the last, which PHP reads, is among them; more than a few, or long ones, count against every rule", () => {
    expect(on("/?q=a&q=user/login")).toEqual(expect.arrayContaining(["/user/login", "/a"]));
    expect(on("/?q=user/login&q=a")).toEqual(expect.arrayContaining(["/user/login", "/a"]));
    expect(on("/?rest_route=/x&rest%2Eroute=/wp/v2/users")).toContain("/wp-json/wp/v2/users");
    expect(on(`/?${Array.from({ length: 5 }, (_, i) => `q=a${i}`).join("&")}`)).toBeUndefined();
    expect(on(`/?${Array.from({ length: 5 }, (_, i) => `rest_route=/a${i}`).join("&")}`)).toBeUndefined();
    // and more than 2,048 characters of them: a routed path costs the work of a path, bounded
    expect(on(`/?q=${"a".repeat(2047)}`)).toContain(`/${"a".repeat(2047)}`);
    expect(on(`/?q=${"a".repeat(2048)}`)).toBeUndefined();
    expect(on(`/?q=${"a".repeat(1500)}&r=${"a".repeat(1500)}`)).toBeUndefined();
    expect(on(`/?${"a".repeat(2048)}`)).toEqual(["/"]); // no routing parameter at all
    expect(on(`/?/${"a".repeat(2048)}`)).toBeUndefined();
    expect(on(`/?rest_route=${"a".repeat(2048)}`)).toBeUndefined();
    expect(on(`/v1/users?rest_route=${"a".repeat(2048)}`)).toBeUndefined();
    expect(on(`/search?q=${"a".repeat(4000)}`)).toEqual(own("/search")); // not a front script: q routes nothing
  });

  it("counts a request whose routed path canonicalPath refuses against every rule (undefined), on the paths it routes on", () => {
    for (const query of ["?q=C:%5CWindows", "?rest_route=/wp/v2/users%00", "?r=v1%252Fusers", "?q=%25C0%25AF", "?/a%2Fb"]) expect(on(`/${query}`), query).toBeUndefined();
    expect(on("/v1/users?rest_route=%5C")).toBeUndefined();
    expect(on("/v1/users?q=%5C")).toEqual(own("/v1/users"));
  });

  it("adds nothing for an empty value, and returns the path's own forms as they are for a query that names none of these", () => {
    expect(on("/?q=&r=&rest_route=")).toEqual(["/"]);
    const forms = own("/v1/users");
    for (const search of ["", "?", "?a=1&b=2", "?query=x", "?x=q", "?rr=1", "?page=2&sort=desc", "?x=%2F", "?interest=rest", "?a=b?q=x"])
      expect(matchPaths(search, forms), search).toBe(forms);
  });

  describe("a path a server rewrites into the front script's query (Apache's RewriteRule ^(.*)$ index.php?q=$1, nginx's rewrite ^/(.*)$ /index.php?q=$1)", () => {
    it("matches the path a routing parameter after a & in the decoded path routes to: raw, escaped (%26), and escaped twice (%2526, decoded twice as the path is)", () => {
      for (const path of ["/x&q=user/login", "/x%26q=user/login", "/x%2526q=user/login", "/a/b&r=user/login", "/x&q=user/login&y=1", "/x%26q=user/login%3Fy"])
        expect(on(path), path).toEqual(expect.arrayContaining(["/user/login", "/user/login/"]));
      // WordPress reads rest_route on any request that reaches its index.php
      expect(on("/x%26rest_route=/wp/v2/users")).toEqual(expect.arrayContaining(["/wp-json/wp/v2/users", "/wp/v2/users"]));
      expect(on("/x&rest_route=%252Fwp%252Fv2%252Fusers")).toContain("/wp-json/wp/v2/users"); // the server decodes once, PHP once more
      // on any path, not the front script alone: the rewrite moves every path into the front script's query
      expect(on("/v1/users&q=user/login")).toContain("/user/login");
      // and the request's own query routes too
      expect(on("/x&q=user/login?rest_route=/wp/v2/users")).toEqual(expect.arrayContaining(["/user/login", "/wp-json/wp/v2/users"]));
    });

    it("matches the path before the first & as well: the rewrite makes it the value of its own parameter (?q=user/login&x=1 is user/login)", () => {
      expect(on("/user/login&x=1")).toEqual(expect.arrayContaining(["/user/login", "/user/login/", "/user/login&x=1"]));
      expect(on("/user/login%26")).toContain("/user/login");
      // a & that routes nowhere else: the path's own forms and those of the path before it
      expect(on("/search/rock&roll")).toEqual([...own("/search/rock&roll"), ...own("/search/rock")]);
    });

    it("reads the names after a & as PHP registers them, escaped once more in the path", () => {
      for (const path of ["/x&%2571=user/login", "/x&+q=user/login", "/x%26%2520q=user/login", "/x&q%2500x=user/login", "/x&%2572=user/login"])
        expect(on(path), path).toContain("/user/login");
      for (const name of ["rest.route", "rest+route", "rest[route", "%2572est_route", "rest%255Froute"])
        expect(on(`/x&${name}=/wp/v2/users`), name).toContain("/wp-json/wp/v2/users");
      for (const path of ["/x&Q=user/login", "/x&qq=user/login", "/x&q[]=user/login", "/x&R=user/login", "/x&rest_routes=/user/login"])
        expect(on(path), path).not.toContain("/user/login");
    });

    it("takes every value after every &, the path before the first counting as one: more than four, or 2,048 characters, count against every rule", () => {
      expect(on("/a&q=b&q=user/login&r=c")).toEqual(expect.arrayContaining(["/a", "/b", "/user/login", "/c"]));
      expect(on("/a&q=b&q=c&q=d&q=e")).toBeUndefined();
      expect(on("/a&rest_route=/b&rest_route=/c&rest_route=/d&rest_route=/e&rest_route=/f")).toBeUndefined();
      expect(on(`/x&q=${"a".repeat(2000)}`)).toContain(`/${"a".repeat(2000)}`);
      expect(on(`/x&q=${"a".repeat(2100)}`)).toBeUndefined();
      expect(on(`/${"a".repeat(2100)}&x`)).toBeUndefined();
    });

    it("counts a path whose routed value canonicalPath refuses against every rule (undefined)", () => {
      for (const path of ["/x&q=C:%255CWindows", "/x%26rest_route=/wp/v2/users%2500", "/x&r=v1%25252Fusers", "/x&q=%2525C0%2525AF"]) expect(on(path), path).toBeUndefined();
    });

    it("reads the path the origin receives, the first of canonicalPath's forms", () => {
      for (const path of ["/x%26q=user/login", "//x/./y&q=a/", "/X&q=a.json;v=1", "/index.php/x&q=a"]) {
        const c = canonicalPath(path);
        expect(c.ok && c.matchOn[0], path).toBe(c.ok && c.path);
      }
    });

    it("returns the path's own forms as they are for a path without & or %26 (decoded once or twice)", () => {
      for (const path of ["/v1/users", "/a%20b", "/a%25b", "/a%2527", "/x%3Fq=user/login", "/x;q=user/login", "/x%3Bq=user/login"]) {
        const forms = own(path);
        expect(matchPaths("", forms), path).toBe(forms);
        expect(matchPaths("?page=2", forms), path).toBe(forms);
      }
    });

    it("works out a long path with many & in time linear in its length", () => {
      const started = performance.now();
      for (const path of [`/${"&".repeat(50_000)}`, `/${"a&q=".repeat(20_000)}`, `/x${"%26".repeat(20_000)}`, `/x&q=${"a/".repeat(40_000)}`]) {
        const c = canonicalPath(path);
        if (c.ok) matchPaths("", c.matchOn);
      }
      expect(performance.now() - started).toBeLessThan(2000);
    });
  });

  it("works out a long query in time linear in its length", () => {
    const started = performance.now();
    for (const search of [`?${"?".repeat(100_000)}`, `?${"&a".repeat(50_000)}`, `?${"&%".repeat(50_000)}`, `?a=${"q".repeat(100_000)}`, `?/${"a/".repeat(50_000)}`])
      matchPaths(search, own("/"));
    expect(performance.now() - started).toBeLessThan(2000);
  });
});
