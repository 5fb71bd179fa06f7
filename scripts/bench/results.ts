import type { codeVersion } from './lib/trace.ts';
import type { machine, versions } from './lib/server.ts';
import type { RunConditions } from './context.ts';
import type { SECTIONS } from './sections/index.ts';

/*
 * bench-results.json's shape: the run's conditions (context.ts RunConditions, what every part of
 * the report reads), the machine and code measured, and what each section measured.
 * A section's part is what its `run` returns (sections/index.ts lists them), so the shape is
 * written once, where the figures are made; report.ts and targets.ts read it.
 */

/** A union of object types as the one object holding each one's members. */
type Merged<U> = (U extends unknown ? (u: U) => void : never) extends (m: infer M) => void ? M : never;

/** Every section's part; absent when the section did not run or failed. */
type Measured = Partial<Merged<Awaited<ReturnType<(typeof SECTIONS)[number]['run']>>>>;

export interface BenchResults extends Measured, RunConditions {
  mode: 'full' | 'smoke';
  startedAt: string;
  durationSeconds?: number;
  /** The code measured: HEAD and whether the tree had uncommitted changes. */
  code: ReturnType<typeof codeVersion>;
  machine: ReturnType<typeof machine>;
  versions: ReturnType<typeof versions>;
  postgresSettings: Record<string, string>;
}
