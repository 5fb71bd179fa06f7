/** Small statistics helpers: every figure in the report is a median of runs or a percentile of samples. */

export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Nearest-rank percentile (p in 0..100) of raw samples. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.min(s.length, Math.max(1, Math.ceil((p / 100) * s.length)));
  return s[rank - 1]!;
}

export const round = (n: number, digits = 2) => (Number.isFinite(n) ? Number(n.toFixed(digits)) : n);

/** A measurement repeated `runs` times: every run's value plus the median the report uses. */
export interface Repeated<T extends Record<string, number>> {
  runs: T[];
  median: T;
}

/** Runs `measure` n times in sequence and takes the median of each numeric field separately. */
export async function repeat<T extends Record<string, number>>(n: number, measure: (run: number) => Promise<T>): Promise<Repeated<T>> {
  const runs: T[] = [];
  for (let i = 0; i < n; i++) runs.push(await measure(i));
  const keys = Object.keys(runs[0] ?? {}) as (keyof T)[];
  const med = {} as T;
  for (const k of keys) med[k] = round(median(runs.map((r) => r[k] as number)), 3) as T[keyof T];
  return { runs, median: med };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Milliseconds since `start` (a process.hrtime.bigint() value). */
export const msSince = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;
