import { repeatOf, type Measured } from './stats.ts';

/**
 * Keeps the runs of each configuration of a throughput section: `measure` runs one measurement,
 * keeps its result under `key` (with whose it is and its label) and logs it; `configs` gives each
 * configuration's runs with their median, min and max.
 */
export function recorder<T extends Record<string, number>>(log: (msg: string) => void, show: (t: T) => string) {
  const runs: Record<string, { system: string; label: string; runs: T[] }> = {};
  return {
    async measure(key: string, system: string, label: string, measure: () => Promise<T>) {
      const t = await measure();
      (runs[key] ??= { system, label, runs: [] }).runs.push(t);
      log(`   ${label}: ${show(t)}`);
      return t;
    },
    configs: (): Record<string, Measured<T>> =>
      Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, { system: v.system, label: v.label, runs: repeatOf(v.runs) }])),
  };
}
