import type { Fleet } from "./fleet.ts";

export interface Tally {
  trials: number;
  requests: number;
  /** trials in which exactly `limit` requests were admitted */
  exact: number;
  /** admitted count of each trial, in order */
  admitted: number[];
  /** any status other than 200 and 429 */
  unexpected: number[];
}

/**
 * The contention check: per trial, a fresh identity fires `m` requests at once across the
 * fleet's isolates; exactly `limit` must be admitted. Returns the tally over all trials.
 */
export async function runTrials(fleet: Fleet, options: { trials: number; m: number; limit: number; onTrial?: (i: number, admitted: number) => void }): Promise<Tally> {
  const tally: Tally = { trials: 0, requests: 0, exact: 0, admitted: [], unexpected: [] };
  const run = crypto.randomUUID().slice(0, 4);
  for (let i = 0; i < options.trials; i++) {
    // a documentation-range IPv6 /64 per trial: a fresh bucket each time
    const codes = await fleet.burst(options.m, { "cf-connecting-ip": `2001:db8:${run}:${i.toString(16)}::1` });
    const admitted = codes.filter((c) => c === 200).length;
    tally.trials++;
    tally.requests += codes.length;
    tally.admitted.push(admitted);
    if (admitted === options.limit) tally.exact++;
    tally.unexpected.push(...codes.filter((c) => c !== 200 && c !== 429));
    options.onTrial?.(i, admitted);
  }
  return tally;
}
