import { memo } from "../memo.ts";
import { canonicalPath, decodeAll, distinct, phpName, SCRIPT_SUFFIX } from "./canonical.ts";

/**
 * The paths a request's query routes it to, for applications that route by a query parameter
 * of their front script: the same handler runs for the query's spelling as for the path's, so a
 * rule on the path must count both.
 *
 * - WordPress serves `?rest_route=/wp/v2/users` as `/wp-json/wp/v2/users`, on any path (WP's
 *   parse_request reads the parameter from $_GET whatever the path, and rest_api_loaded serves it):
 *   matched as `/wp-json` and the route, and as the route alone.
 * - On the front script alone (`/` and every path canonicalPath folds into it: `/index.php`,
 *   `/index.php/`, `/index`…; and `/index.php/x`, the script with PATH_INFO): Drupal 7 routes
 *   `?q=user/login` as `/user/login` (request_path), Yii `?r=site/login` as `/site/login` (its
 *   urlManager without pretty URLs), CodeIgniter 3
 *   `?/site/login` as `/site/login` (a query that starts with `/`, up to its first `&`).
 * - The path itself, where a server rewrites it into the front script's query (see
 *   `pathAsQuery`): a `&` in the decoded path starts another parameter, so `/x%26q=user/login`
 *   is `/user/login` and `/user/login&x=1` is too.
 *
 * Names are read as PHP registers them (`phpName`: `?%71=`, `?+q=`, `?rest.route=`,
 * `?q%00x=`), values decoded once as PHP decodes them, and every value of a repeated name is
 * taken (PHP reads the last, within its max_input_vars): more than `MOST_VALUES` of them or
 * `MOST_LENGTH` characters, or a routed path canonicalPath refuses (`?q=a%5Cb`), and the
 * request counts against every rule (undefined), as a path with no canonical form does in the
 * library. A value routes as a path with the same canonicalPath machinery
 * (`?rest_route=/wp/v2/%2575sers` is `/wp/v2/users` too). An empty value routes to the front
 * page, which the request is already matched as: nothing added.
 *
 * The forwarded request is unchanged: these forms are only matched.
 *
 * @param own the path's match forms as canonicalPath gives them: the path itself (what the origin receives) first
 * @example
 * matchPaths("?q=user/login", ["/"]);                       // ["/", "/user/login", "/user/login/"]
 * matchPaths("?page=2", ["/v1/users", "/v1/users/"]);       // the same array: nothing to add
 * matchPaths("", canonicalPath("/x%26q=user/login").matchOn); // its own forms, "/x", "/x/", "/user/login", "/user/login/"
 */
export function matchPaths(search: string, own: readonly string[]): readonly string[] | undefined {
  // most queries name none of these: one test of the raw query, no parse
  const byQuery = search.length < 3 || !mayRoute(search) ? NOTHING : queryForms(search, own);
  // most paths hold no `&` (nor a `%`, once canonicalPath has decoded what it decodes): a scan or two of the path
  const path = own[0];
  const byPath = path === undefined || !mayHoldAmpersand(path) ? NOTHING : pathAsQuery(path);
  if (byQuery === undefined || byPath === undefined) return undefined;
  if (byQuery.length === 0 && byPath.length === 0) return own;
  // told apart by length first: a long crafted value's forms are not each hashed in full (see canonical.ts's stringSet)
  return distinct([...own, ...byQuery, ...byPath]);
}

const NOTHING: readonly string[] = [];

/** The forms a request's query routes it to on a path whose forms are `own`; undefined: refused, or too many. */
function queryForms(search: string, own: readonly string[]): readonly string[] | undefined {
  const routes = routesFor(search);
  // only a query that names q, r or ?/path asks whether this is the front script
  const front = routes.front?.length !== 0 && runsFrontScript(own);
  if (routes.anywhere === undefined || (front && routes.front === undefined)) return undefined;
  return front ? [...routes.anywhere, ...routes.front!] : routes.anywhere;
}

/**
 * Whether the path holds a `&`, raw or escaped once or twice (`%26`, `%2526`: canonicalPath's
 * forms decode a path twice): what a server's rewrite into the query may read as the start of
 * another parameter. Escapes of other characters are looked past (`%20`, `%2F`). Two scans with
 * `includes` for a path without a `%`, which are several times faster than one regular
 * expression's on a long path.
 */
const mayHoldAmpersand = (path: string) => path.includes("&") || (path.includes("%") && ESCAPED_AMPERSAND.test(path));
const ESCAPED_AMPERSAND = /%(?:25)?26/;

/**
 * The forms of the paths `path` routes to where the server rewrites it into the front script's
 * query (`path` is the one the origin receives), none if its decoded forms hold no `&`;
 * undefined: refused, or too many. Apache's mod_rewrite decodes a path before it matches it, and
 * its backreferences go into the substitution as they are (unless the rule has the B flag), so
 * Drupal 6's `RewriteRule ^(.*)$ index.php?q=$1` makes `/x%26q=user/login` `index.php?q=x&q=user/login`,
 * whose last `q` PHP reads; nginx puts its decoded `$uri` into `try_files … /index.php?q=$uri&$args`
 * as it is, and its `rewrite ^/(.*)$ /index.php?q=$1` (Drupal 7's `@rewrite`, old WordPress setups)
 * a capture after the `?` unescaped unless the request's path held a `%` or `+` (then it escapes
 * `&`), so a raw `&` does the same there. Read as that query on the front script: the path up to
 * its first `&` as the value of the rewrite's own parameter (`/user/login&x=1` is `user/login`),
 * and every routing parameter after it (`q`, `r`, and WordPress's `rest_route`, named as PHP
 * reads them), with the query's bounds and refusals (see `matchPaths`). The path decoded once, as
 * the server decodes it, and twice, for a stack where a proxy decodes it first, as canonicalPath
 * decodes paths; the request's own query is read on its own (`matchPaths`), not appended (the
 * rewrite appends it, but a `?q=` off the front script routes nothing to the gate: see the README).
 */
const pathAsQuery = (path: string) => (path.length < MEMO_MAX_LENGTH ? recentPaths(path) : pathAsQueryOf(path));

function pathAsQueryOf(path: string): readonly string[] | undefined {
  const once = decodeAll(path);
  const twice = decodeAll(once);
  const forms: string[] = [];
  for (const decoded of once === twice ? [once] : [once, twice]) {
    if (!decoded.includes("&")) continue;
    // `?q=` and the path: its first segment never starts the query with `/` (no CodeIgniter 3 `?/path`)
    const routes = routesFor(`?q=${decoded.slice(1)}`);
    if (routes.anywhere === undefined || routes.front === undefined) return undefined;
    forms.push(...routes.anywhere, ...routes.front);
  }
  return forms;
}

/**
 * Whether a request runs the front script: its path is `/` to canonicalPath (`/index.php`,
 * `/index.php/`, `//`, `/index`…), or the front script with more path after it (`/index.php/x`,
 * which Apache and nginx's `fastcgi_split_path_info` run as `/index.php` with PATH_INFO `/x`;
 * Drupal 7 reads `?q=` and Yii `?r=` whatever PATH_INFO holds). The forms hold the script's
 * other spellings already (`/INDEX.PHP./x`, `/index.php;x/x` as `/index.php/x`).
 */
const runsFrontScript = (own: readonly string[]) => own.includes("/") || own.some((form) => FRONT_SCRIPT_PATH_INFO.test(form));
/** The front script's segment with more path after it: `index.php` (or `default.aspx`…), in any case. */
const FRONT_SCRIPT_PATH_INFO = new RegExp(`^/(?:index|default)${SCRIPT_SUFFIX.source.replace(/\$$/, "")}/`, "i");

/**
 * Whether a query may name a routing parameter: it starts with `/`, holds `route` (every
 * unescaped spelling of `rest_route` does), or has a parameter named `q` or `r` (after any `+`,
 * a space) or a name with an escape (which may spell any of them). Each test is a scan of the
 * query that stops at its first hit, the escape's only for a query that holds a `%`: linear in
 * its length, and for most queries a few tens of nanoseconds.
 */
const mayRoute = (search: string) => search.charCodeAt(1) === 47 || search.includes("route") || NAMES_Q_OR_R.test(search) || (search.includes("%") && ESCAPED_NAME.test(search));
/** A parameter named `q` or `r`, after any `+` (and a `?` in a value too: a few more queries read). */
const NAMES_Q_OR_R = /[?&]\+*[qr](?:[=&]|$)/;
/** A name with an escape: from a `?` or `&` to a `%` before any `=`, `&` or `?` (a name is looked at only up to them). */
const ESCAPED_NAME = /[?&][^=&?]*%/;

/** The most values of routing parameters a query is read for; more count against every rule. */
const MOST_VALUES = 4;
/**
 * The most characters of routed paths a query is read for, `rest_route`'s and the others' apart;
 * more count against every rule (of the front script for the others'): a routed path costs as
 * much work as a request's own path, and a crafted one of 8 KB milliseconds.
 */
const MOST_LENGTH = 2048;

/** A query's routed paths' match forms: anywhere (`rest_route`), and on the front script alone; undefined: refused, or too many. */
interface QueryRoutes {
  anywhere: readonly string[] | undefined;
  front: readonly string[] | undefined;
}

/** The paths one kind of parameter routes to, and how many and how long: past the bounds, none are worked out. */
interface Routed {
  paths: string[];
  values: number;
  length: number;
}

const within = (routed: Routed) => routed.values <= MOST_VALUES && routed.length <= MOST_LENGTH;

/** A value's path, and the same without its dot segments (see `withoutDotSegments`): both are worked out, so both count towards `MOST_LENGTH`. */
function add(routed: Routed, path: string) {
  const undotted = withoutDotSegments(path);
  routed.values++;
  routed.length += undotted === path ? path.length : path.length + undotted.length;
  if (within(routed)) routed.paths.push(...(undotted === path ? [path] : [path, undotted]));
}

function routesOf(search: string): QueryRoutes {
  const rest: Routed = { paths: [], values: 0, length: 0 };
  const named: Routed = { paths: [], values: 0, length: 0 };
  for (const [name, value] of new URLSearchParams(search)) {
    if (value === "") continue;
    const php = phpName(name);
    if (php === "rest_route") add(rest, `/${value}`);
    else if (php === "q" || php === "r") add(named, `/${value}`);
  }
  // CodeIgniter 3: the raw query, which is spelt as a path is (its `?` is cut by canonicalPath)
  if (search[1] === "/") {
    const amp = search.indexOf("&");
    add(named, search.slice(1, amp < 0 ? undefined : amp));
  }
  const routes = within(rest) ? formsOf(rest.paths) : undefined;
  return {
    // the route behind WordPress's /wp-json prefix, and the route itself
    anywhere: routes && distinct([...routes.flatMap((form) => (form === "/" ? ["/wp-json", "/wp-json/"] : [`/wp-json${form}`])), ...routes]),
    front: within(named) ? formsOf(named.paths) : undefined,
  };
}

/** Every match form of `paths`, once each; undefined for one canonicalPath refuses. */
function formsOf(paths: readonly string[]): readonly string[] | undefined {
  const forms: string[] = [];
  for (const path of paths) {
    const c = canonicalPath(path);
    if (!c.ok) return undefined;
    forms.push(...c.matchOn);
  }
  return paths.length > 1 ? distinct(forms) : forms;
}

/**
 * `path` without its `.` and `..` segments, escaped ones too (`%2E`, `%252E`, which canonicalPath
 * decodes): a routed value reaches the origin as sent, and the application does not resolve
 * them as canonicalPath does: CodeIgniter 3 drops `..` segments (`?/site/login/../..` is
 * `/site/login`), Drupal 7 routes by the longest registered prefix (`?q=user/login/../..` is
 * `user/login`), WordPress matches its route patterns against the value as it is. Matched as
 * well as the resolved forms. Linear in the length of `path`.
 */
function withoutDotSegments(path: string): string {
  if (!path.includes(".") && !path.includes("%")) return path;
  const segments = path.split("/");
  const kept = segments.filter((segment) => !DOT_SEGMENT.test(segment));
  return kept.length === segments.length ? path : kept.join("/") || "/";
}
/** A segment of dots alone, any of them escaped once or twice. */
const DOT_SEGMENT = /^(?:\.|%(?:25)?2e)+$/i;

/**
 * A flood repeats its queries and paths: each is read once per isolate, memory bounded as
 * canonicalPath's memo is (1,024 queries of under 512 characters, and of their forms 8,192
 * characters each; as many paths with a `&`).
 */
const recentQueries = memo(routesOf, 1024, (r) => totalLength([...(r.anywhere ?? []), ...(r.front ?? [])]) <= MEMO_MAX_FORMS);
const recentPaths = memo(pathAsQueryOf, 1024, (forms) => forms === undefined || totalLength(forms) <= MEMO_MAX_FORMS);
const totalLength = (forms: readonly string[]) => forms.reduce((sum, form) => sum + form.length, 0);
/** A query's routes, remembered for a short one (see `recentQueries`). */
const routesFor = (search: string) => (search.length < MEMO_MAX_LENGTH ? recentQueries(search) : routesOf(search));
const MEMO_MAX_LENGTH = 512;
const MEMO_MAX_FORMS = 8192;
