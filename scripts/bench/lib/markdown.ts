import type { TargetResult } from '../context.ts';
import type { Compared, Repeated } from './stats.ts';
import { GUARANTEES } from '../peers/guarantees.ts';

/** The pieces bench-results.md is written with: numbers, medians with their spread, the shared tables. */

export const n = (v: number | null | undefined, digits = 0) =>
  v === null || v === undefined || !Number.isFinite(v)
    ? '—'
    : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
export const x = (v: number | null | undefined) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : `${n(v, 2)}×`);
/** A median with its spread over the runs, each divided by `unit`: "1,234 (1,100–1,300)". */
export const mm = <T extends Record<string, number>>(rep: Repeated<T>, k: keyof T, digits = 0, unit = 1) => {
  const v = (t: T) => n(unit === 1 ? (t[k] as number) : (t[k] as number) / unit, digits);
  return rep.runs.length > 1 ? `${v(rep.median)} (${v(rep.min)}–${v(rep.max)})` : v(rep.median);
};

export const MIB = 2 ** 20;
/** A byte count's median and spread in MiB. */
export const mmMiB = <T extends Record<string, number>>(rep: Repeated<T>, k: keyof T) => mm(rep, k, 1, MIB);

/** Whether a target was met, as the report says it. */
export const metLabel = (t: TargetResult) => (t.met === null ? 'not measured' : t.met ? 'met' : '**missed**');

const LABELS: Record<string, string> = {
  bestOfOurs: '**best of ours** (the fastest median of these, chosen after the run)',
  bestPeer: '**strongest peer configuration**',
};

/**
 * Every configuration of ours (rows) against each peer's strongest configuration and the
 * strongest of all (columns), each column labelled with the configuration it is.
 */
function ratioTable<T extends Record<string, number>>(L: string[], c: Compared<T>, rate: keyof T & string) {
  const cols = Object.keys(Object.values(c.ratios)[0] ?? {});
  const median = (k: string) => c.configs[k]!.runs.median[rate] as number;
  const strongestOfAll = Object.values(c.strongest).reduce<string | undefined>(
    (a, k) => (a === undefined || median(k) > median(a) ? k : a),
    undefined,
  );
  const head = (col: string) => {
    const key = col === 'bestPeer' ? strongestOfAll : c.strongest[col];
    const name = col === 'bestPeer' ? LABELS.bestPeer! : `strongest ${col}`;
    return key ? `${name} (${c.configs[key]!.label})` : name;
  };
  L.push(`| ours ÷ | ${cols.map(head).join(' | ')} |`, `|---|${cols.map(() => '---:').join('|')}|`);
  for (const [k, row] of Object.entries(c.ratios)) {
    L.push(`| ${LABELS[k] ?? c.configs[k]?.label ?? k} | ${cols.map((col) => x(row[col])).join(' | ')} |`);
  }
  L.push('');
}

/** Every configuration measured in a throughput section, the strongest of each peer marked. */
function configTable<T extends Record<string, number>>(
  L: string[],
  c: Compared<T>,
  rate: keyof T & string,
  time: keyof T & string,
  timeHead: string,
) {
  L.push(`| Configuration | Messages/s | ${timeHead} | Runs (msg/s) |`, '|---|---:|---:|---|');
  const marked = new Set(Object.values(c.strongest));
  for (const [k, m] of Object.entries(c.configs)) {
    const label = marked.has(k) ? `${m.label} **(strongest ${m.system})**` : m.label;
    L.push(`| ${label} | ${mm(m.runs, rate)} | ${mm(m.runs, time, 2)} | ${m.runs.runs.map((v) => n(v[rate])).join(', ')} |`);
  }
  L.push('');
}

/** Each peer's same-guarantee configuration, and what its fastest one gives up, one line each. */
function guaranteeLines(L: string[]) {
  L.push(
    'Each peer two ways: its fastest configuration, and its configuration that keeps what we keep (per-key order, a completion a stale worker cannot overwrite, history kept for the retention); the targets compare with the second.',
    '',
  );
  for (const [peer, g] of Object.entries(GUARANTEES)) {
    L.push(`- **${peer}**, same guarantees: ${g.same} Its fastest configuration gives up ${g.fastestGivesUp}`);
  }
  L.push('');
}

/**
 * A throughput section's tables: every configuration measured, what the section's configurations
 * are (`about`), ours against each peer's strongest, and what each peer's fastest gives up.
 */
export function comparedTables<T extends Record<string, number>>(
  L: string[],
  c: Compared<T>,
  cols: { rate: keyof T & string; time: keyof T & string; timeHead: string },
  about: string,
) {
  configTable(L, c, cols.rate, cols.time, cols.timeHead);
  L.push(about, '', "Ratios of medians, each configuration of ours against each peer's strongest configuration:", '');
  ratioTable(L, c, cols.rate);
  guaranteeLines(L);
}

/** The targets whose name starts with `prefix`, as lines under a section's tables. */
export function targetLines(L: string[], targets: TargetResult[] | undefined, prefix: string) {
  const ts = (targets ?? []).filter((t) => t.name.startsWith(prefix));
  if (ts.length === 0) return;
  for (const t of ts) L.push(`- ${t.name}: ${t.value}, target ${t.target}: ${metLabel(t)}`);
  L.push('');
}
