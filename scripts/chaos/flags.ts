import path from 'node:path';
import { parseFlags, usageError, wholeNumber } from '../bench/lib/cli.ts';
import { ROOT } from '../lib/processes.ts';
import { FAULT_KINDS, type FaultKind } from './fault-kinds.ts';

/* The chaos run's command line: `npm run chaos -- --help` prints USAGE. */

const USAGE = `usage: npm run chaos -- [--duration SECONDS] [--seed N] [--out DIR] [--concurrency N] [--keep]
       npm run chaos -- --judge FILE

Runs embedded Postgres, the API, two outbox workers, an SMTP server and (with nats-server) the
events relay and earnings consumer, puts load on them while injecting faults drawn from the seed,
lets the workers drain and checks that nothing was lost. Exit 0: every invariant held; 1: one
broke; 2: bad flags or a harness failure.

  --duration SECONDS   seconds of load, 10 to 86400 (default 60)
  --seed N             seed of the faults, the load and the SMTP refusals, 0 to 4294967295
                       (default: random, printed)
  --out DIR            where to write chaos-results.json and chaos-results.md (default: var/chaos/SEED)
  --concurrency N      client loops putting load on the API, 1 to 1000 (default 6)
  --outbox-writes W    table (default) or wal: the API writes its messages as rows, or to the WAL for
                       the workers to make rows of (OUTBOX_WRITES; the server runs with wal_level=logical)
  --keep               keep the run's temporary folder (logs, data, the judge's input) even when it passes
  --only-faults K,...  inject only these kinds of the seed's faults (${FAULT_KINDS.join(', ')}),
                       to see one kind's effect alone; the other kinds' minimums then fail the verdict
  --judge FILE         judge a kept run's evidence again (judge-input.json in its folder): print the
                       verdict as JSON, start nothing; exit 0 if every invariant held, 1 if not,
                       2 if the file cannot be read
  -h, --help           print this and exit

Environment:
  CI=true              fail (exit 2) instead of skipping the events part when nats-server is missing
  CHAOS_CODE_COMMIT    the commit run, when the tree is not a git checkout
`;

export function readFlags(argv: string[]) {
  const values = parseFlags(
    'chaos',
    USAGE,
    {
      duration: { type: 'string', default: '60' },
      seed: { type: 'string' },
      out: { type: 'string' },
      concurrency: { type: 'string', default: '6' },
      keep: { type: 'boolean', default: false },
      judge: { type: 'string' },
      'only-faults': { type: 'string' },
      'outbox-writes': { type: 'string', default: 'table' },
    },
    argv,
  );
  const num = (name: string, v: string, min: number, max: number) => wholeNumber('chaos', USAGE, name, v, min, max);
  // The generator keeps 32 bits of the seed: a larger one would repeat a smaller one's run.
  const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : num('seed', values.seed, 0, 2 ** 32 - 1);
  return {
    durationSeconds: num('duration', values.duration, 10, 86_400),
    seed,
    out: path.resolve(values.out ?? path.join(ROOT, 'var', 'chaos', String(seed))),
    concurrency: num('concurrency', values.concurrency, 1, 1_000),
    keep: values.keep,
    // A kept run's judge-input.json to judge again, instead of a run.
    judge: values.judge === undefined ? undefined : path.resolve(values.judge),
    onlyFaults: values['only-faults'] === undefined ? undefined : faultKinds(values['only-faults']),
    outboxWrites: outboxWrites(values['outbox-writes']),
  };
}

export type Flags = ReturnType<typeof readFlags>;

function outboxWrites(v: string): 'table' | 'wal' {
  if (v !== 'table' && v !== 'wal') usageError('chaos', USAGE, `--outbox-writes: table or wal, not "${v}"`);
  return v as 'table' | 'wal';
}

function faultKinds(list: string): FaultKind[] {
  const kinds = list.split(',').map((k) => k.trim());
  for (const k of kinds) {
    if (!(FAULT_KINDS as readonly string[]).includes(k)) usageError('chaos', USAGE, `--only-faults: unknown fault kind "${k}"`);
  }
  return kinds as FaultKind[];
}
