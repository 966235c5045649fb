import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalPath } from "../../src/http/canonical.ts";

// The match forms as aee9edd worked them out, step by step over the whole path for each form,
// before the steps learnt to leave alone what they do not change: the same path must give the
// same forms, in the same order, only sooner.
const reference = (() => {
  const UNRESERVED = /[A-Za-z0-9\-._~]/;
  const REFUSED: Record<string, string> = {
    "2F": "an encoded slash (%2F)",
    "5C": "an encoded backslash (%5C)",
    "00": "an encoded NUL (%00)",
  };

  const AMBIGUOUS_ESCAPES = /%C[01]|%E0%[89]|%F0%8|%F8%8[0-7](?:%[89AB][0-9A-F]){3}|%FC%8[0-3](?:%[89AB][0-9A-F]){4}|%u[0-9A-F]{4}/i;

  function normaliseEscapes(path: string): { path: string } | { problem: string } {
    const ambiguous = AMBIGUOUS_ESCAPES.exec(path);
    if (ambiguous) return { problem: `an ambiguous escape (${ambiguous[0]}, an overlong or %u encoding)` };
    let out = "";
    for (let i = 0; i < path.length; i++) {
      const c = path[i]!;
      if (c === "\\") return { problem: "a backslash" };
      if (c === "\0") return { problem: "a NUL character" };
      if (c !== "%") {
        out += c;
        continue;
      }
      if (!/^[0-9A-Fa-f]{2}$/.test(path.slice(i + 1, i + 3))) {
        out += "%25";
        continue;
      }
      const hex = path.slice(i + 1, i + 3).toUpperCase();
      const refused = REFUSED[hex];
      if (refused) return { problem: refused };
      const char = String.fromCharCode(parseInt(hex, 16));
      out += UNRESERVED.test(char) ? char : `%${hex}`;
      i += 2;
    }
    return { path: out };
  }

  function normaliseSegments(path: string): string {
    const segments = path.split("/");
    const out: string[] = [];
    const last = segments.length - 1;
    segments.forEach((segment, i) => {
      if (segment === "..") out.pop();
      else if (segment !== "." && segment !== "") out.push(segment);
      if (i === last && (segment === "" || segment === "." || segment === "..") && out.length > 0) out.push("");
    });
    return `/${out.join("/")}`;
  }

  function decodeAll(path: string): string {
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

  function untilQuery(path: string): string {
    const end = path.search(/[?#;]/);
    return end < 0 ? path : unlessEveryPath(path, normaliseSegments(path.slice(0, end)));
  }

  const unlessEveryPath = (path: string, cut: string) => (cut.includes("*") && /^[/*]*$/.test(cut) && !/^[/*]*$/.test(path) ? path : cut);

  const SCRIPT_SUFFIX = /\.(?:php\d?|phtml|cgi|fcgi|pl|py|asp|aspx|ashx|asmx|jsp|cfm|dll|exe)$/i;

  const namesScript = (segment: string) => segment[0] !== "." && !segment.includes("*") && SCRIPT_SUFFIX.test(segment);

  function withoutScript(path: string): string {
    const segments = path.split("/");
    const script = segments.findIndex((segment, i) => i < segments.length - 1 && namesScript(trimSegment(segment.replace(/;.*/, ""))));
    if (script < 0) return path;
    const rest = segments.slice(script + 1);
    if (rest.every((segment) => /^\**$/.test(segment))) return path;
    segments.splice(script, 1);
    return normaliseSegments(segments.join("/"));
  }

  const withoutCookieless = (path: string) => (path.includes("/(") ? unlessEveryPath(path, normaliseSegments(path.replace(/\/\((?:[A-Za-z]\([^()/]*\))+\)/g, ""))) : path);

  const withoutParams = (path: string) => path.replace(/;[^/]*/g, "");
  const withoutTrailingSlash = (path: string) => (path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path);
  function trimSegment(segment: string): string {
    let start = 0;
    let end = segment.length;
    while (start < end && segment.charCodeAt(start) <= 32) start++;
    while (end > start && (segment.charCodeAt(end - 1) <= 32 || segment.charCodeAt(end - 1) === 46)) end--;
    return start === 0 && end === segment.length ? segment : segment.slice(start, end);
  }

  const withoutDots = (path: string) => path.split("/").map(trimSegment).join("/") || "/";

  function withoutFormat(path: string): string {
    const segments = path.split("/").map(trimSegment);
    const last = segments.length - 1;
    const dot = segments[last]!.indexOf(".");
    if (dot > 0) segments[last] = segments[last]!.slice(0, dot);
    return segments.join("/") || "/";
  }

  function referenceForms(pathname: string) {
    const escaped = normaliseEscapes(pathname);
    if ("problem" in escaped) return { ok: false, refused: escaped.problem };
    const path = normaliseSegments(escaped.path);
    const forms = new Set<string>();
    const decoded = decodeAll(path);
    const seen = new Set<string>();
    const twice = decoded === path ? path : normaliseSegments(decodeAll(decoded));
    // since 1dde941: decoded twice, a backslash read as a slash as well (IIS behind a proxy that decodes once)
    const slashed = twice.includes("\\") ? normaliseSegments(twice.replaceAll("\\", "/")) : twice;
    const bases = [path, decoded, twice, slashed, untilQuery(path), untilQuery(decoded), untilQuery(twice), untilQuery(slashed)].flatMap((base) => [base, withoutCookieless(base)]);
    for (const form of bases.flatMap((base) => [base, withoutScript(base)])) {
      if (seen.has(form)) continue;
      seen.add(form);
      const unparameterised = form === path && !form.includes(";") ? form : normaliseSegments(withoutParams(form));
      for (const variant of [form, unparameterised]) {
        if (variant !== form && seen.has(variant)) continue;
        seen.add(variant);
        const bare = withoutTrailingSlash(variant);
        for (const v of [variant, normaliseSegments(withoutDots(bare)), normaliseSegments(withoutFormat(bare))]) {
          const plain = withoutTrailingSlash(v);
          forms.add(v);
          forms.add(plain);
          forms.add(plain === "/" ? plain : `${plain}/`);
        }
      }
    }
    return { ok: true, path, matchOn: [...forms] };
  }

  return referenceForms;
})();

const atom = fc.constantFrom(
  "a",
  "A",
  "x.",
  ". ",
  ".",
  "..",
  ";",
  ";p",
  "%",
  "?",
  "#",
  " ",
  "\t",
  "*",
  "~",
  "-",
  "_",
  "/",
  "//",
  "(S(x))",
  "%28S%28x%29%29",
  "%2528S%2528x%2529%2529",
  ".php",
  ".PHP",
  ".json",
  "index.php",
  "%3F",
  "%23",
  "%3B",
  "%3b",
  "%20",
  "%2520",
  "%09",
  "%0a",
  "%2e",
  "%2E",
  "%252e",
  "%25",
  "%zz",
  "%41",
  "%61",
  "%7e",
  "%C4%B0",
  "%c4%b0",
  "İ",
  "%E9",
  "%F8",
  "%FC",
  "%80",
  "%8",
  "%2f",
  "%5c",
  "%255c",
  "\\",
  "%00",
  "%C0%AF",
  "%u002f",
);
const segment = fc.array(atom, { maxLength: 8 }).map((a) => a.join(""));
const anyPath = fc.oneof(
  fc.array(segment, { maxLength: 8 }).map((s) => `/${s.join("/")}`),
  fc.array(segment, { maxLength: 4 }).map((s) => s.join("/")),
  fc.string({ unit: "binary", maxLength: 30 }),
);

/**
 * Forms matched since aee9edd, each worked out from a form it gives: a directory's index script
 * (fe0c41b) or a controller's index action as the directory, a page's Next.js data route or segment prefetch as the page
 * (6b1b65c), a page's SvelteKit, React Router, Nuxt, Gatsby or Qwik City data request as the page. The reference stays
 * as aee9edd had it but for one base added to it, the path decoded twice with its backslashes read
 * as slashes (1dde941), so the forms worked out from that base are checked exactly, where a form
 * merely beside a backslash was let pass whatever it was; these are tested in canonical.test.ts.
 */
function addedSince(form: string, forms: readonly string[]): boolean {
  return forms.some((f) => {
    if (/\/_next\/data\/|\.segments\/|\/(?:__data\.json|_root\.data|_\.data|_payload\.js(?:on)?|page-data\.json|q-data\.json)$/i.test(f)) return true;
    const dir = f.slice(0, f.lastIndexOf("/") + 1);
    return /^(?:(?:index|default)\.[^/]*|index)$/i.test(f.slice(dir.length)) && (form === dir || form === dir.slice(0, -1));
  });
}

/**
 * The reference's answer: its path, and every form it gives, the path's own first; a form added
 * since may stand among them (and move a form the reference gives later, such as "/", ahead:
 * the order of the forms beyond the first is not what a rule's match reads).
 */
function expectReference(p: string) {
  const live = canonicalPath(p);
  const ref = reference(p);
  if (!live.ok || !ref.ok) return expect(live, p.slice(0, 40)).toEqual(ref);
  const forms = ref.matchOn as string[];
  expect(live.path, p.slice(0, 40)).toBe(ref.path);
  expect(live.matchOn[0], p.slice(0, 40)).toBe(forms[0]);
  expect(new Set(live.matchOn), p.slice(0, 40)).toEqual(new Set([...forms, ...live.matchOn.filter((f) => addedSince(f, forms))]));
}

describe("the match forms, worked out faster", () => {
  it("are those aee9edd worked out, and the forms added since, for any path (fast-check)", () => {
    fc.assert(
      fc.property(anyPath, (p) => {
        expectReference(p);
      }),
      { numRuns: 20_000 },
    );
  });

  it("are those aee9edd worked out for long crafted paths, which take the paths the memo does not", () => {
    const run = (piece: string, n: number) => piece.repeat(n);
    for (const p of [
      `/%2528S%2528x%2529%2529/a.php/x/${run("%C4%B0", 2000)}/y%2520/%2523;p/b.json.`,
      `/%2528s%2528x%2529%2529/a.php/x/${run("%c4%b0", 2000)}/y%2520/%2523;p/b.json.`,
      `/%2528S%2528x%2529%2529/a.php/${run("x.;p%20/", 500)}/y%2520/%2523;p/b.json.`,
      `/v1/${run("abc/", 500)}users.json`,
      `/${run("a/..;/", 300)}index.php;x/${run("%20./", 300)}(S(y))/z`,
    ]) {
      expectReference(p);
    }
  });
});
