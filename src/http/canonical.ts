import { memo } from "../memo.ts";

/**
 * The canonical request: one spelling of the path, computed once per request, used both to
 * match rules and as the path the origin receives. Origins are lenient — they decode
 * percent-encoding, merge slashes, resolve dot segments, ignore case, drop `;` parameters and
 * trailing slashes, serve HEAD with the GET handler, honour method-override headers — so every
 * spelling an origin may route to one handler must count against the same rules.
 *
 * Two halves:
 * - the forwarded path: percent-encoded unreserved characters decoded, the remaining
 *   escapes upper-cased (RFC 3986 §6.2.2) and a `%` that starts no escape written `%25`, runs
 *   of `/` merged, dot segments resolved. What the
 *   origin receives has nothing left for it to normalise differently.
 * - the match forms: the forwarded path as it is, fully decoded (once, and twice, with a `\`
 *   that decodes to read as `/` as well, as IIS behind a decoding proxy reads it), cut at a
 *   `;` or a `?` or `#` it decodes to (a rewrite that puts it back into a URL ends it there),
 *   each without ASP.NET's cookieless session data (`/(S(x))/v1` is `/v1` to the .NET
 *   Framework) and without a script's segment that more path follows (`/index.php/v1` is `/v1`
 *   to a front controller), each also as the page Next.js routes a data route or segment
 *   prefetch to (`/_next/data/<build id>/v1.json` and `/v1.segments/_tree.segment.rsc` are `/v1`),
 *   and SvelteKit, React Router, Nuxt, Gatsby and Qwik City a data request (`/v1/__data.json`,
 *   `/v1/_.data`, `/_root.data`, `/v1/_payload.json`, `/page-data/v1/page-data.json`,
 *   `/v1/q-data.json`),
 *   with `;` parameters dropped, with a format suffix, trailing dots and the spaces around
 *   segments dropped (`/v1/users.json`, `/v1/users.` and `/v1/users%20` are `/v1/users` to
 *   Rails, Spring's suffix matching and trimmed segments, and IIS), without a directory's index
 *   script (`/v1/index.php` is `/v1/` to Apache and nginx) or a controller's `index` action
 *   (`/v1/index` is `/v1/` to ASP.NET MVC's default route), and each of those
 *   with and without a trailing slash (`/v1` is `/v1/` to Express, so a rule on `/v1/*` covers
 *   it). A rule matches when it matches any of them: matching errs toward covering more,
 *   never less.
 *
 * A request whose query routes it (WordPress's `?rest_route=`, a front script's `?q=`) is
 * matched on the forms of the path it routes to as well: src/http/query-routes.ts.
 *
 * Encoded `/` (`%2F`), `\` (`%5C` or raw) and NUL (`%00`) are refused, and so are escapes
 * only some decoders accept (overlong UTF-8, `%uXXXX`): origins disagree on what they mean,
 * so no single canonical form exists.
 *
 * @example
 * const c = canonicalPath("//%76%31/./Users;v=2/");
 * c.ok && c.path;     // "/v1/Users;v=2/"
 * c.ok && c.matchOn;  // ["/v1/Users;v=2/", "/v1/Users;v=2", "/v1/Users/", "/v1/Users"]
 * canonicalPath("/v1/users.json").matchOn; // ["/v1/users.json", "/v1/users.json/", "/v1/users", "/v1/users/"]
 */
export type CanonicalPath =
  | { ok: true /** what the origin receives */; path: string /** what rules are matched against */; matchOn: readonly string[] }
  | { ok: false /** what the path contains that is refused, e.g. "an encoded slash (%2F)" */; refused: string };

const REFUSED: Record<string, string> = {
  "2F": "an encoded slash (%2F)",
  "5C": "an encoded backslash (%5C)",
  "00": "an encoded NUL (%00)",
};

/**
 * Escapes that some decoders turn into `/`, `\` or `.` and others do not: overlong UTF-8
 * (`%C0%AF` is `/` to a lenient decoder, invalid to a strict one), in the five- and six-byte
 * sequences of the first UTF-8 too, which old lenient decoders (IIS 5) still read
 * (`%F8%80%80%80%AF`, `%FC%80%80%80%80%AF`: only a whole overlong sequence, as `%F8` and `%FC`
 * start `ø` and `ü` in a Latin-1 path, `ø…` in cp1252, and GBK characters such as `%F8%86`),
 * and IIS-style `%u002F`.
 */
const AMBIGUOUS_ESCAPES = /%C[01]|%E0%[89]|%F0%8|%F8%8[0-7](?:%[89AB][0-9A-F]){3}|%FC%8[0-3](?:%[89AB][0-9A-F]){4}|%u[0-9A-F]{4}/i;

/** What the path holds that is refused, the first of them: a raw `\` or NUL, or an escape of `/`, `\` or NUL. */
const REFUSED_CHARACTER = /[\\\0]|%(?:2F|5C|00)/i;

const isHex = (code: number) => (code >= 48 && code <= 57) || ((code | 32) >= 97 && (code | 32) <= 102);
const hexValue = (code: number) => (code <= 57 ? code - 48 : (code | 32) - 87);
/** a-f: an escape spelled with one is upper-cased */
const isLowerHex = (code: number) => code >= 97;
const isUnreserved = (code: number) => (code >= 48 && code <= 57) || ((code | 32) >= 97 && (code | 32) <= 122) || code === 45 || code === 46 || code === 95 || code === 126;

/**
 * Decodes escaped unreserved characters and upper-cases the other escapes, or names what is
 * refused. Copies only around the escapes it changes: a long path of upper-case escapes of
 * other characters is returned as it is, where one built character by character cost
 * milliseconds.
 */
function normaliseEscapes(path: string): { path: string } | { problem: string } {
  const ambiguous = AMBIGUOUS_ESCAPES.exec(path);
  if (ambiguous) return { problem: `an ambiguous escape (${ambiguous[0]}, an overlong or %u encoding)` };
  const refused = REFUSED_CHARACTER.exec(path)?.[0];
  if (refused === "\\") return { problem: "a backslash" };
  if (refused === "\0") return { problem: "a NUL character" };
  if (refused) return { problem: REFUSED[refused.slice(1).toUpperCase()]! };
  let out = "";
  let copied = 0;
  for (let i = path.indexOf("%"); i >= 0; i = path.indexOf("%", i + 1)) {
    const high = path.charCodeAt(i + 1);
    const low = path.charCodeAt(i + 2);
    if (!isHex(high) || !isHex(low)) {
      // a "%" that starts no escape is a literal one: left bare, the escapes decoded after it
      // would make a new one ("%%32%46" would reach the origin as "%2F")
      out += `${path.slice(copied, i)}%25`;
      copied = i + 1;
      continue;
    }
    const code = hexValue(high) * 16 + hexValue(low);
    if (isUnreserved(code)) out += path.slice(copied, i) + String.fromCharCode(code);
    else if (isLowerHex(high) || isLowerHex(low)) out += `${path.slice(copied, i)}%${path.slice(i + 1, i + 3).toUpperCase()}`;
    else {
      i += 2;
      continue;
    }
    copied = i + 3;
    i += 2;
  }
  return { path: copied === 0 ? path : out + path.slice(copied) };
}

/** A `//`, or a `.` or `..` segment: what `normaliseSegments` changes in a path that starts with `/`. */
const UNNORMAL_SEGMENT = /\/\/|\/\.\.?(?:\/|$)/;

/** Runs of `/` merged, then `.` and `..` segments resolved (RFC 3986 §5.2.4); always starts with `/`. */
function normaliseSegments(path: string): string {
  // most paths, and most forms of them, have nothing to resolve: not copied, and looked at with
  // includes, which finds no `//` and no `/.` in them ten times faster than a regular expression
  if (path[0] === "/" && !path.includes("//") && (!path.includes("/.") || !UNNORMAL_SEGMENT.test(path))) return path;
  const segments = path.split("/");
  const out: string[] = [];
  // the last segment decides the trailing slash: "/a/" and "/a/." both end in a directory
  const last = segments.length - 1;
  segments.forEach((segment, i) => {
    if (segment === "..") out.pop();
    else if (segment !== "." && segment !== "") out.push(segment);
    if (i === last && (segment === "" || segment === "." || segment === "..") && out.length > 0) out.push("");
  });
  return `/${out.join("/")}`;
}

/**
 * Every escape decoded that decodes to text; undecodable ones stay as they are.
 *
 * @example
 * decodeAll("/a%20b%FF"); // "/a b%FF"
 */
export function decodeAll(path: string): string {
  return path.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run.replace(/%[0-9A-Fa-f]{2}/g, (one) => {
        try {
          return decodeURIComponent(one);
        } catch {
          return one;
        }
      });
    }
  });
}

/**
 * A path up to its first `?`, `#` or `;`: a rewrite that puts the decoded path back into a
 * URL (Apache's mod_rewrite `RewriteRule ^(.*)$ index.php/$1`, nginx's `proxy_pass` with a
 * variable) ends the path at a decoded `?` or `#`, so `/v1/users%3Fx` reaches the handler of
 * `/v1/users`; Fastify 4 starts the query at a `;` (`useSemicolonDelimiter`), so
 * `/v1/users;x/y` does too.
 */
function untilQuery(path: string): string {
  // indexOf, not a search for [?#;]: many times faster on a long path
  const ends = ["?", "#", ";"].map((c) => path.indexOf(c)).filter((end) => end >= 0);
  return ends.length === 0 ? path : unlessEveryPath(path, normaliseSegments(path.slice(0, Math.min(...ends))));
}

/**
 * `cut`, unless it is wildcards alone and `path` is not: a rule's glob cut so (`/*?debug=*`,
 * `/(S(*))/*`) would be `/*`, every path, which it never meant.
 */
const unlessEveryPath = (path: string, cut: string) => (cut.includes("*") && /^[/*]*$/.test(cut) && !/^[/*]*$/.test(path) ? path : cut);

/** The suffix of a script's name, in any case (`index.php`, `app.cgi`, `Default.aspx`): servers run it for the paths beneath it too. */
export const SCRIPT_SUFFIX = /\.(?:php\d?|phtml|cgi|fcgi|pl|py|asp|aspx|ashx|asmx|jsp|cfm|dll|exe)$/i;

/** What a segment that names a script holds (`SCRIPT_SUFFIX` less its end, as `;` parameters and trailing dots may follow). */
const SCRIPT_HINT = /\.(?:php|phtml|cgi|fcgi|pl|py|asp|ashx|asmx|jsp|cfm|dll|exe)/i;

/** A segment that names a script: not a name with a dot (`john.doe`, `v1.2`), nor a rule glob's `*.php`, which names every script. */
const namesScript = (segment: string) => segment[0] !== "." && !segment.includes("*") && SCRIPT_SUFFIX.test(segment);

/**
 * The path without the first segment that names a script when more path follows it (its `;`
 * parameters, spaces and trailing dots aside, as elsewhere): a front controller routes what
 * follows its script (PATH_INFO), so Symfony and Laravel route `/index.php/api/login` as
 * `/api/login`, as CodeIgniter and CGI applications do. Not when only wildcards or a slash
 * follow it: a rule's glob (`/xmlrpc.php/*`, `/xmlrpc.php/`) cut so would be `/*` or `/`, every
 * path or the home page, which it never meant (and `/index.php/` is the script itself, as
 * `/index.php` is).
 */
function withoutScript(path: string): string {
  // a path of many segments is split only when one of them may name a script
  if (!SCRIPT_HINT.test(path)) return path;
  const segments = path.split("/");
  const script = segments.findIndex((segment, i) => i < segments.length - 1 && segment.includes(".") && namesScript(trimSegment(segment.replace(/;.*/, ""))));
  if (script < 0) return path;
  const rest = segments.slice(script + 1);
  if (rest.every((segment) => /^\**$/.test(segment))) return path;
  segments.splice(script, 1);
  return normaliseSegments(segments.join("/"));
}

/**
 * The path without ASP.NET's cookieless session data (`/(S(…))`, `/(A(…)S(…)F(…))`), which the
 * .NET Framework strips with the slash before it, wherever it stands: `/(S(x))/v1/users` is
 * `/v1/users` to it, and `/ad/(S(x))min` is `/admin`, a name split by one made whole again.
 */
const withoutCookieless = (path: string) => (path.includes("/(") ? unlessEveryPath(path, normaliseSegments(path.replace(/\/\((?:[A-Za-z]\([^()/]*\))+\)/g, ""))) : path);

/**
 * A directory's index: its index script, `index.php`, `index.cgi`, `index.jsp`, `default.aspx`
 * and the like (`index` or `default` with a script's suffix, in any case), which servers run for
 * the directory's own path — Apache's DirectoryIndex and nginx's `index` in PHP and CGI setups,
 * IIS's default documents, a servlet container's welcome files; and `index` alone, a
 * controller's default action, which MVC routing runs for the controller's own path (ASP.NET
 * MVC's conventional route `{controller}/{action=Index}`, CakePHP, CodeIgniter, Yii).
 */
const INDEX = new RegExp(`^(?:(?:index|default)${SCRIPT_SUFFIX.source.slice(0, -1)}|index)$`, "i");

/**
 * A path without dots (see `withoutDots`) whose last segment is a
 * directory's index (see `INDEX`), as that directory (`/v1/users/index.php` and
 * `/v1/users/index` are `/v1/users/`, `/index.php` is `/`): the server runs the one for the
 * other. Not when a wildcard stands before it: a rule's glob `/app/*\/index.php` as `/app/*\/`
 * would be every path beneath `/app/`.
 */
function withoutIndex(trimmed: string): string {
  const start = trimmed.lastIndexOf("/") + 1;
  return INDEX.test(trimmed.slice(start)) && !trimmed.slice(0, start).includes("*") ? trimmed.slice(0, start) : trimmed;
}

/** A Next.js data route's prefix, behind the application's basePath if it has one. */
const NEXT_DATA = /\/_next\/data\//i;
/** The start of a Next.js segment prefetch's own part: `<page>.segments/<segment path>.segment.rsc`. */
const NEXT_SEGMENTS = /\.segments\//i;

/** A Next.js page path as its router reads it: `/index` is `/` and `/index/x` is `/x` (`denormalizePagePath`). */
const denormalisedPage = (page: string) => (page === "/index" ? "/" : page.startsWith("/index/") ? page.slice("/index".length) : page);

/**
 * The pages Next.js routes a request for a page's own data or segments to, none for any other
 * path: its data route `/_next/data/<build id>/v1/users.json` runs the page `/v1/users` (its
 * getServerSideProps; `/_next/data/v1/users.json` where a deployment ID stands for the build ID,
 * `/_next/data/<build id>/index.json` the page `/`, and behind a basePath the prefix comes after
 * it: NextDataPathnameNormalizer), and a segment prefetch `/v1/users.segments/_tree.segment.rsc`
 * renders `/v1/users` (SegmentPrefixRSCPathnameNormalizer, at the first `.segments/`). Not a
 * rule's glob cut to wildcards alone (`/_next/data/*.json` is not `/*`).
 */
function nextPages(path: string): string[] {
  const pages: string[] = [];
  const data = NEXT_DATA.exec(path);
  if (data && /\.json$/i.test(path)) {
    const before = path.slice(0, data.index);
    // "/<build id>/v1/users", or "/v1/users" with a deployment ID: both
    const rest = path.slice(data.index + "/_next/data".length, -".json".length);
    const afterId = rest.indexOf("/", 1);
    for (const page of afterId < 0 ? [rest] : [rest.slice(afterId), rest]) pages.push(before + denormalisedPage(page));
  }
  const segments = NEXT_SEGMENTS.exec(path);
  if (segments && segments.index > 0 && /\.segment\.rsc$/i.test(path)) pages.push(path.slice(0, segments.index));
  return pages.map((page) => unlessEveryPath(path, normaliseSegments(page)));
}

/**
 * The last segment of a request for a page's data that SvelteKit and React Router route as the
 * page, running its server load functions or loaders: SvelteKit's `<page>/__data.json` (its
 * client fetches `/search/__data.json?q=x` to navigate to `/search?q=x`), React Router's
 * `/_root.data` for the home page (behind a basename too) and, with its trailing-slash-aware data
 * requests, `<page>/_.data` for `<page>/` (its `<page>.data` is the format suffix); and Nuxt's
 * `<page>/_payload.json` (`_payload.js` without JSON payloads), which its renderer renders as
 * `<page>` for its payload, running the page's server-side data fetching; and Qwik City's
 * `<page>/q-data.json`, which runs the page's route loaders.
 */
const ROUTER_DATA = /\/(?:__data\.json|_root\.data|_\.data|_payload\.js(?:on)?|q-data\.json)$/i;

/**
 * A Gatsby request for a page's data, `/page-data/<page>/page-data.json` (`index` for `/`), behind
 * a path prefix if the site has one: Gatsby's server runs an SSR page's getServerData for it.
 * Its end and its first `/page-data/` are looked for apart: one expression with `(.+)` between
 * them backtracks from every `/page-data/` of a long path, in time quadratic in its length.
 */
const GATSBY_DATA_END = /\/page-data\.json$/i;
const GATSBY_DATA_START = /\/page-data\//i;

/** The page of a Gatsby data request (see `GATSBY_DATA_END`), or undefined. */
function gatsbyPage(path: string): string | undefined {
  const end = GATSBY_DATA_END.exec(path)?.index;
  const start = end === undefined ? undefined : GATSBY_DATA_START.exec(path);
  if (end === undefined || !start || start.index + start[0].length >= end) return undefined;
  const page = path.slice(start.index + start[0].length, end);
  return `${path.slice(0, start.index)}/${/^index$/i.test(page) ? "" : page}`;
}

/** The page a SvelteKit, React Router, Nuxt, Qwik City or Gatsby data request is routed as (see `ROUTER_DATA`, `GATSBY_DATA_END`), none for any other path. */
function routerDataPages(path: string): string[] {
  const pages: string[] = [];
  const data = ROUTER_DATA.exec(path);
  if (data) pages.push(path.slice(0, data.index + 1));
  const gatsby = gatsbyPage(path);
  if (gatsby !== undefined) pages.push(gatsby);
  return pages.map((page) => unlessEveryPath(path, normaliseSegments(page)));
}

/** `;` parameters dropped from every segment, as servlet containers and others route. */
const withoutParams = (path: string) => (path.includes(";") ? path.replace(/;[^/]*/g, "") : path);
const withoutTrailingSlash = (path: string) => (path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path);
/**
 * `segment` without the spaces and control characters around it and the dots it ends in:
 * Windows drops trailing dots and spaces from a name (IIS serves `/index.php. ` as
 * `/index.php`), Spring's `trimTokens` trims each segment as Java's `String.trim` does,
 * every character up to U+0020 at either end, and a regex router's `$` matches before a final
 * newline (PCRE, Python, Ruby: `^/v1/users$` routes `/v1/users%0A`). In time linear in its
 * length (a regex like /\.+$/ is quadratic on a long run of dots).
 */
function trimSegment(segment: string): string {
  let start = 0;
  let end = segment.length;
  while (start < end && segment.charCodeAt(start) <= 32) start++;
  while (end > start && (segment.charCodeAt(end - 1) <= 32 || segment.charCodeAt(end - 1) === 46)) end--;
  return start === 0 && end === segment.length ? segment : segment.slice(start, end);
}

/** A character `trimSegment` drops at either end of a segment (a dot too, at its end). */
const isBlank = (code: number) => code <= 32;

/**
 * Whether `trimSegment` cuts anything from a segment of `path`: most paths have nothing to cut,
 * and are not split and joined again. Looks only beside each `/` and at the ends, which is
 * many times faster than a regular expression that tries every character.
 */
function hasTrimmable(path: string): boolean {
  if (path.endsWith(".") || path.includes("./") || isBlank(path.charCodeAt(0)) || isBlank(path.charCodeAt(path.length - 1))) return true;
  for (let i = path.indexOf("/"); i >= 0; i = path.indexOf("/", i + 1)) if (isBlank(path.charCodeAt(i - 1)) || isBlank(path.charCodeAt(i + 1))) return true;
  return false;
}

/** Every segment trimmed (see `trimSegment`), as IIS serves `/index.php.` as `/index.php`. */
const withoutDots = (path: string) => (hasTrimmable(path) ? path.split("/").map(trimSegment).join("/") : path) || "/";

/**
 * A path without dots (see `withoutDots`) with the last segment cut at its first dot (a
 * segment that starts with one is a name): Rails routes `/login.a-b` to `/login` (its
 * `(.:format)`), Spring's suffix matching `/login.tar.gz`. Linear in the path's length.
 */
function withoutFormat(trimmed: string): string {
  const start = trimmed.lastIndexOf("/") + 1;
  const dot = trimmed.indexOf(".", start);
  return dot > start ? trimmed.slice(0, dot) : trimmed;
}

/** The canonical path of a URL's `pathname` (as `new URL(...).pathname` spells it). */
export function canonicalPath(pathname: string): CanonicalPath {
  return pathname.length < MEMO_MAX_LENGTH ? recentPaths(pathname) : canonicalPathOf(pathname);
}

/**
 * A flood repeats its paths: each is worked out once per isolate (memory bounded: 1,024 paths
 * of under 512 characters, and of their forms 8,192 characters each). A path of 511 characters
 * crafted for some two hundred forms holds 100 KB of them, and 1,024 held tens of MB; such a
 * path is worked out again each time, a few passes over its characters.
 */
const recentPaths = memo(canonicalPathOf, 1024, (c) => !c.ok || c.matchOn.reduce((sum, form) => sum + form.length, 0) <= MEMO_MAX_FORMS);
const MEMO_MAX_LENGTH = 512;
const MEMO_MAX_FORMS = 8192;

function canonicalPathOf(pathname: string): CanonicalPath {
  const escaped = normaliseEscapes(pathname);
  if ("problem" in escaped) return { ok: false, refused: escaped.problem };
  const path = normaliseSegments(escaped.path);
  const forms = stringSet();
  const decoded = decodeAll(path);
  // Each form and variant is worked out once: for most paths the decoded forms and the one
  // without parameters are the path itself (normalising is idempotent), and a long path not
  // remembered by the memo costs a few passes, not thirty. Every form is normal already (the
  // path and its cuts are normalised, and decoding once makes no `/` or `.` segment: `%2F` is
  // refused and `%2E` decoded in the path), so one a step leaves as it was is not normalised again.
  const seen = stringSet();
  // decoded twice too, for a stack where a proxy and the application each decode once
  const twice = decoded === path ? path : normaliseSegments(decodeAll(decoded));
  // `%255C` is the `%5C` refused above to the application behind such a proxy, and the `\` it
  // decodes to is a `/` to IIS: `/x/..%255C..%255Cv1` is `/v1` there, so that reading counts too
  const slashed = twice.includes("\\") ? normaliseSegments(twice.replaceAll("\\", "/")) : twice;
  // each distinct: most are the path itself, which a long path of many segments makes costly
  const bases = distinct([path, decoded, twice, slashed, untilQuery(path), untilQuery(decoded), untilQuery(twice), untilQuery(slashed)]).flatMap((base) => [
    base,
    withoutCookieless(base),
  ]);
  const pages = distinct(bases).flatMap((base) => [base, ...nextPages(base), ...routerDataPages(base)]);
  for (const form of distinct(pages).flatMap((base) => [base, withoutScript(base)])) {
    if (seen.has(form)) continue;
    seen.add(form);
    const unparameterised = form.includes(";") ? normaliseSegments(withoutParams(form)) : form;
    for (const variant of [form, unparameterised]) {
      if (variant !== form && seen.has(variant)) continue;
      seen.add(variant);
      const bare = withoutTrailingSlash(variant);
      const dotless = withoutDots(bare);
      const trimmed = dotless === bare ? bare : normaliseSegments(dotless);
      for (const v of [variant, trimmed, normaliseSegments(withoutFormat(dotless)), withoutIndex(trimmed)]) {
        forms.add(v);
        // and v's other spelling, with or without the trailing slash ("/" has one spelling)
        if (v === "/") continue;
        forms.add(v.endsWith("/") ? v.slice(0, -1) : `${v}/`);
      }
    }
  }
  return Object.freeze({ ok: true, path, matchOn: Object.freeze(forms.values) });
}

/**
 * `strings` without repeats, in the order they first come (see `stringSet`).
 *
 * @example
 * distinct(["/a", "/b", "/a"]); // ["/a", "/b"]
 */
export function distinct(strings: readonly string[]): string[] {
  const set = stringSet();
  for (const s of strings) set.add(s);
  return set.values;
}

/**
 * A set of strings told apart by length first, then by content: a Set hashes each new string
 * of up to 16,383 characters in full (some 20 µs for a form of 10,000 `İ`), and a long path
 * makes a hundred such forms, most of lengths no other has.
 */
function stringSet() {
  const byLength = new Map<number, string[]>();
  const values: string[] = [];
  return {
    values,
    has: (s: string) => byLength.get(s.length)?.includes(s) ?? false,
    add(s: string) {
      const same = byLength.get(s.length);
      if (same?.includes(s)) return;
      if (same) same.push(s);
      else byLength.set(s.length, [s]);
      values.push(s);
    },
  };
}

/** The method-override headers frameworks obey (their underscore spellings are dropped on the way to the origin). */
export const OVERRIDE_HEADERS = ["x-http-method-override", "x-http-method", "x-method-override"];

/** Among the methods of a request: it may be handled as any method at all (see `methodsOf`). */
export const ANY_METHOD = "*";

/** A form body (Hono reads `_method` from one sent with any method but GET, HEAD included): url-encoded or any multipart. */
const FORM = /^\s*(?:application\/x-www-form-urlencoded|multipart\/)/i;

/**
 * A query parameter's name as PHP reads it: up to its first NUL (PHP registers names as C
 * strings, so `?_method%00x=` is `$_GET['_method']`), leading spaces dropped, ` `, `.` and `[`
 * as `_` (`?.method=` is `$_GET['_method']`).
 *
 * @example
 * phpName(" rest.route"); // "rest_route"
 */
export const phpName = (name: string) => {
  const nul = name.indexOf("\0");
  return (nul < 0 ? name : name.slice(0, nul)).trimStart().replace(/[ .[]/g, "_");
};

/**
 * The methods a request may be handled as: its own, GET for HEAD (frameworks serve HEAD with
 * the GET handler), PATCH for PUT and PUT for PATCH (Rails' and Laravel's resource routes send
 * both to one update action), any method-override header or `_method` query parameter (as PHP spells
 * parameter names, too), which frameworks with an override middleware obey, and any method at
 * all (`ANY_METHOD`) for a request whose body may name one: a POST with a body (Rails reads
 * `_method` from any form or multipart body, Laravel from a JSON one too) and a form sent with
 * any method but GET (Hono's middleware passes over a GET alone, and a Worker receives a HEAD's
 * body, which the gate forwards). The body is streamed to the origin unread, so such a
 * request counts against every rule of its path.
 *
 * @example
 * methodsOf(new Request("https://x/", { method: "HEAD" }), new URL("https://x/")); // ["HEAD", "GET"]
 */
export function methodsOf(request: Request, url: URL): readonly string[] {
  const method = request.method.toUpperCase();
  const methods = new Set([method]);
  const overrides = OVERRIDE_HEADERS.map((h) => request.headers.get(h));
  // url.searchParams is built on first use: a query that neither spells "method" nor holds an
  // escape (which may spell it: "_%6Dethod") never builds it
  if (/method|%/i.test(url.search)) for (const [name, value] of url.searchParams) if (phpName(name).toLowerCase() === "_method") overrides.push(value);
  for (const value of overrides) {
    for (const m of value?.split(",") ?? []) {
      const name = m.trim();
      if (!name) continue;
      methods.add(name.toUpperCase());
      // as an origin that lower-cases it to route it reads it: Express's router reads "LOC\u212A"
      // (a Kelvin sign, which upper-casing keeps) as "lock"
      methods.add(name.toLowerCase().toUpperCase());
    }
  }
  if (methods.has("HEAD")) methods.add("GET");
  // Rails' and Laravel's resource routes send PUT and PATCH to one update action
  if (methods.has("PUT")) methods.add("PATCH");
  else if (methods.has("PATCH")) methods.add("PUT");
  // the runtime gives every POST a body stream: one declared empty (Content-Length: 0, not chunked) names nothing
  const declaredEmpty = request.headers.get("content-length")?.trim() === "0" && !request.headers.has("transfer-encoding");
  const bodyMayNameOne = (method === "POST" && request.body !== null && !declaredEmpty) || (method !== "GET" && FORM.test(request.headers.get("content-type") ?? ""));
  if (bodyMayNameOne) methods.add(ANY_METHOD);
  return [...methods];
}
