import { didYouMean } from "../config/nearest.ts";

/** A field's name as an answer quotes it: at most 64 characters, as a name sent by mistake may be anything, a raw key too. */
export const echo = (name: string) => JSON.stringify(name.slice(0, 64));

/**
 * What a request body holds beyond the fields a route takes, as the words of a 400 (undefined:
 * nothing). A misspelt field ("windw", "curser") is not ignored: the route would run as if it
 * were left out, and a dry run asked for by another name would import. Every such field is
 * named, each cut to 64 characters.
 *
 * @example
 * unknownFields({ minutes: 5, minuts: 5 }, ["minutes"]); // '"minuts": unknown field (allowed: minutes); did you mean "minutes"?'
 * unknownFields({ section: "rules" }, []);                // '"section": unknown field (allowed: none; send {})'
 */
export function unknownFields(body: Record<string, unknown>, allowed: readonly string[]): string | undefined {
  const unknown = Object.keys(body).filter((field) => !allowed.includes(field));
  if (unknown.length === 0) return undefined;
  const meant = unknown.length === 1 ? didYouMean(unknown[0]!, allowed) : "";
  return `${unknown.map(echo).join(", ")}: unknown field${unknown.length > 1 ? "s" : ""} (allowed: ${allowed.length ? allowed.join(", ") : "none; send {}"})${meant}`;
}

/** A schema's words for a field it does not take, `name`, among `allowed`: the list, and the one meant when one is close. */
export const unknownField = (name: unknown, allowed: readonly string[]) => `unknown field (allowed: ${allowed.join(", ")})${didYouMean(String(name), allowed)}`;
