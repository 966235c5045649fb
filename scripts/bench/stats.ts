/** Percentiles and summaries shared by the benchmarks. */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export function summary(samplesMs: number[]) {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  return { p50: round(percentile(sorted, 50)), p99: round(percentile(sorted, 99)), n: sorted.length };
}

export const round = (x: number, digits = 3) => Number(x.toFixed(digits));

/** `value / baseline`, rounded, for the "×" columns. */
export const ratio = (value: number, baseline: number) => round(value / baseline, 3);
