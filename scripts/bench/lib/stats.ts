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

/** A measurement repeated `runs` times: every run's value, the median the report uses, and the spread. */
export interface Repeated<T extends Record<string, number>> {
  runs: T[];
  median: T;
  min: T;
  max: T;
}

/** Median, min and max of each numeric field of runs already taken (interleaved loops collect their own). */
export function repeatOf<T extends Record<string, number>>(runs: T[]): Repeated<T> {
  const keys = Object.keys(runs[0] ?? {}) as (keyof T)[];
  const med = {} as T;
  const min = {} as T;
  const max = {} as T;
  for (const k of keys) {
    const values = runs.map((r) => r[k] as number);
    med[k] = round(median(values), 3) as T[keyof T];
    min[k] = round(Math.min(...values), 3) as T[keyof T];
    max[k] = round(Math.max(...values), 3) as T[keyof T];
  }
  return { runs: runs.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, round(v, 3)])) as T), median: med, min, max };
}

/** Runs `measure` n times in sequence and takes the median of each numeric field separately. */
export async function repeat<T extends Record<string, number>>(n: number, measure: (run: number) => Promise<T>): Promise<Repeated<T>> {
  const runs: T[] = [];
  for (let i = 0; i < n; i++) runs.push(await measure(i));
  return repeatOf(runs);
}

/** Each key's runs with their median, min and max. */
export function repeatEach<M extends Record<string, Record<string, number>>>(runs: { [K in keyof M]: M[K][] }): {
  [K in keyof M]: Repeated<M[K]>;
} {
  return Object.fromEntries(Object.entries(runs as Record<string, M[string][]>).map(([k, v]) => [k, repeatOf(v)])) as {
    [K in keyof M]: Repeated<M[K]>;
  };
}

/** One configuration a section measures: its key in the results, its label, whose it is (ours by default), one run of it. */
export interface Config<K extends string, T> {
  key: K;
  label: string;
  system?: string;
  measure: (run: number) => Promise<T>;
}

/**
 * How a section measures its configurations: `runs` rounds of every configuration, one after the
 * other, so a slow phase of a shared machine does not land on one of them only; `rotate`: each
 * round starts one further along the list, so none always runs first (or last). Each result is
 * logged as `label: show(result)`. Returns each configuration's runs with their median, min and
 * max, in the order given.
 */
export async function measureEach<K extends string, T extends Record<string, number>>(
  runs: number,
  configs: readonly Config<K, T>[],
  opts: { log: (msg: string) => void; show: (t: T) => string; rotate?: boolean },
): Promise<Record<K, Measured<T>>> {
  const taken = new Map<K, T[]>(configs.map((c) => [c.key, []]));
  for (let r = 0; r < runs; r++) {
    for (let i = 0; i < configs.length; i++) {
      const c = configs[opts.rotate ? (i + r) % configs.length : i]!;
      const result = await c.measure(r);
      taken.get(c.key)!.push(result);
      opts.log(`   ${c.label}: ${opts.show(result)}`);
    }
  }
  const measured = configs.map((c) => [c.key, { system: c.system ?? 'ours', label: c.label, runs: repeatOf(taken.get(c.key)!) }]);
  return Object.fromEntries(measured) as Record<K, Measured<T>>;
}

/** Each configuration's runs alone, for the sections whose results keep no system or label. */
export const runsOf = <K extends string, T extends Record<string, number>>(m: Record<K, Measured<T>>) =>
  Object.fromEntries(Object.entries<Measured<T>>(m).map(([k, c]) => [k, c.runs])) as Record<K, Repeated<T>>;

/** p50, p99, max and mean of raw samples (ms), rounded to `digits`. */
export function spread(samples: number[], digits = 3): { p50: number; p99: number; max: number; mean: number } {
  return {
    p50: round(percentile(samples, 50), digits),
    p99: round(percentile(samples, 99), digits),
    max: round(Math.max(...samples), digits),
    mean: round(samples.reduce((a, b) => a + b, 0) / samples.length, digits),
  };
}

/** Milliseconds since `start` (a process.hrtime.bigint() value). */
export const msSince = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;

/** Each of our configurations (rows) against each peer (columns), median over median. */
export type Ratios = Record<string, Record<string, number>>;

/**
 * Every configuration of ours against every peer and against the best peer, never only the best
 * of ours picked after the fact; the best of ours is a row of its own, labelled `bestOfOurs`.
 */
export function ratiosOf(ours: Record<string, number>, peers: Record<string, number>): Ratios {
  const bestPeer = Math.max(...Object.values(peers));
  const row = (v: number) => ({
    ...Object.fromEntries(Object.entries(peers).map(([k, p]) => [k, round(v / p, 3)])),
    bestPeer: round(v / bestPeer, 3),
  });
  return {
    ...Object.fromEntries(Object.entries(ours).map(([k, v]) => [k, row(v)])),
    bestOfOurs: row(Math.max(...Object.values(ours))),
  };
}

/** One configuration measured in a section: whose it is (ours, a peer, a floor), its label, its runs. */
export interface Measured<T extends Record<string, number>> {
  system: string;
  label: string;
  runs: Repeated<T>;
}

/**
 * Each system's strongest configuration: the key of the one whose median `value` is highest.
 * A peer is compared at its strongest supported configuration, never at one we picked for it.
 */
export function strongestOf(configs: Record<string, { system: string; value: number }>): Record<string, string> {
  const best: Record<string, string> = {};
  for (const [key, c] of Object.entries(configs)) {
    const current = best[c.system];
    if (current === undefined || c.value > configs[current]!.value) best[c.system] = key;
  }
  return best;
}

/**
 * A throughput section's comparison: every configuration measured (ours, the peers', the floors'),
 * each peer's strongest configuration, and every configuration of ours against each peer's
 * strongest and against the strongest peer configuration of all (`bestPeer`).
 */
export interface Compared<T extends Record<string, number>> {
  configs: Record<string, Measured<T>>;
  /** Peer → the key (in `configs`) of its strongest configuration, by median. */
  strongest: Record<string, string>;
  ratios: Ratios;
}

/**
 * Compares `oursKeys` (configurations whose system is 'ours') with each peer's strongest
 * configuration by the median `value`; the `bestOfOurs` row is the best of `bestOf` only.
 * Configurations of system 'floor' are no peer.
 */
export function compareConfigs<T extends Record<string, number>>(
  configs: Record<string, Measured<T>>,
  value: (t: T) => number,
  oursKeys: string[],
  bestOf: string[],
): Compared<T> {
  const peers = Object.entries(configs).filter(([, c]) => c.system !== 'ours' && c.system !== 'floor');
  const strongest = strongestOf(Object.fromEntries(peers.map(([k, c]) => [k, { system: c.system, value: value(c.runs.median) }])));
  const peerBest = Object.fromEntries(Object.entries(strongest).map(([peer, key]) => [peer, value(configs[key]!.runs.median)]));
  const ours = (keys: string[]) => Object.fromEntries(keys.map((k) => [k, value(configs[k]!.runs.median)]));
  const ratios: Ratios = { ...ratiosOf(ours(bestOf), peerBest) };
  for (const k of oursKeys.filter((k) => !bestOf.includes(k))) ratios[k] = ratiosOf(ours([k]), peerBest)[k]!;
  return { configs, strongest, ratios };
}
