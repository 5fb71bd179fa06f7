import type { codeVersion, loadBefore } from './lib/trace.ts';
import type { machine, versions } from './lib/server.ts';
import type { BenchParams } from './params.ts';
import type { SECTIONS } from './sections/index.ts';

/*
 * bench-results.json's shape: the run's conditions, what each section measured and the targets.
 * A section's part is what its `run` returns (sections/index.ts lists them), so the shape is
 * written once, where the figures are made; report.ts and targets.ts read it.
 */

export type Drain = { perSecond: number; drainSeconds: number };

/** A union of object types as the one object holding each one's members. */
type Merged<U> = (U extends unknown ? (u: U) => void : never) extends (m: infer M) => void ? M : never;

/** Every section's part; absent when the section did not run or failed. */
type Measured = Partial<Merged<Awaited<ReturnType<(typeof SECTIONS)[number]['run']>>>>;

/**
 * A performance target (what "good" means; the run reports where we stand and never fails on
 * them). `met` is null when the figure could not be measured in this run.
 */
export interface TargetResult {
  name: string;
  target: string;
  value: string;
  met: boolean | null;
}

export interface BenchResults extends Measured {
  mode: 'full' | 'smoke';
  startedAt: string;
  durationSeconds?: number;
  /** The code measured: HEAD and whether the tree had uncommitted changes. */
  code: ReturnType<typeof codeVersion>;
  /** The 1-minute load average before each section; `overloaded` when it exceeded the cores. */
  load: Record<string, ReturnType<typeof loadBefore>>;
  /** Each section's wall-clock time, failures included: where a run's minutes go (the smoke's too). */
  seconds: Record<string, number>;
  machine: ReturnType<typeof machine>;
  versions: ReturnType<typeof versions>;
  postgresSettings: Record<string, string>;
  params: BenchParams;
  setup: Record<string, string>;
  targets?: TargetResult[];
  errors: { section: string; message: string }[];
}
