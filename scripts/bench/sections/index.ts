import type { BenchSection } from '../context.ts';
import { apiHistorySection } from './api-history.ts';
import { apiSection } from './api.ts';
import { burstSection } from './burst.ts';
import { claimSection } from './claim.ts';
import { drainSection } from './drain.ts';
import { fanoutSection } from './fanout.ts';
import { growthSection } from './growth.ts';
import { heldSnapshotSection } from './held-snapshot.ts';
import { ioSection } from './io.ts';
import { latencySection } from './latency.ts';
import { noisySection } from '../noisy.ts';
import { overloadSection } from '../overload.ts';
import { purgeSection } from './purge.ts';
import { relaySection } from '../relay.ts';
import { tracingSection } from '../tracing.ts';
import { walSection } from './wal.ts';
import { webhooksSection } from '../webhooks.ts';

/**
 * Every section of the bench, in the order they run (the webhooks compare with the drain, so the
 * drain comes first). The one list: `--only` and `--help` (run.ts), the report (report.ts, each
 * part at its place), the results' type (results.ts: what each `run` returns) and the list in
 * docs/performance.md (test/unit/bench-sections.test.ts) read it.
 */
export const SECTIONS = [
  claimSection,
  drainSection,
  burstSection,
  latencySection,
  ioSection,
  relaySection,
  webhooksSection,
  tracingSection,
  noisySection,
  apiSection,
  fanoutSection,
  walSection,
  heldSnapshotSection,
  purgeSection,
  growthSection,
  apiHistorySection,
  overloadSection,
] as const satisfies readonly BenchSection[];

/** What `--only` accepts, in the order the sections run. */
export const SECTION_NAMES: readonly string[] = SECTIONS.map((s) => s.name);
