import { OURS_THROUGHPUT, type BenchContext, type PartOf } from '../context.ts';
import { mm, n } from '../lib/markdown.ts';
import { measureEach } from '../lib/stats.ts';
import { walAround } from '../lib/wal.ts';
import { oursDrain } from '../ours.ts';
import { graphileRunDrain } from '../peers/graphile.ts';
import { pgBossDrain } from '../peers/pgboss.ts';
import { applyStorageCandidates, STORAGE_CANDIDATES } from '../lib/outbox.ts';
import { withClient } from '../../lib/postgres.ts';

/*
 * What a message costs PostgreSQL's write-ahead log, from its insert to its completion, for ours
 * and for the peers with the same guarantees (pg-boss's key_strict_fifo queue, graphile-worker with
 * a queue per key) and without them: WAL bytes, B-tree entries written (leaf inserts, splits left
 * out) and WAL records, per message. Each system drains the same backlog on a fresh database with
 * its own drain (the drain section's runs, one process); the WAL is read back with pg_walinspect,
 * this database's records only (lib/wal.ts), after a CHECKPOINT so that each run starts with the
 * same full-page writes ahead of it. Every index entry is a WAL record and a page change: fewer
 * writes per message is what the lean storage is to reach (docs/performance.md, 4c).
 */

/** One system's insert-to-completion writes, per message. */
type WalPerMessage = { walBytes: number; indexEntries: number; records: number };

interface WalSystem {
  key: string;
  label: string;
  /** DDL before the clock (ours with storage candidates applied). */
  prepare?: (url: string) => Promise<void>;
  drain: (url: string, count: number, run: number) => Promise<unknown>;
}

const CANDIDATES = Object.keys(STORAGE_CANDIDATES);
const labelOf = (name: string) => STORAGE_CANDIDATES[name]!.label;

/**
 * Our storage with the candidates of src/outbox/testing.ts applied (the cuts not built yet): each
 * alone when there are several (not in a smoke run), and all of them together, under one key. No
 * row when there is none.
 */
const CANDIDATE_ROWS: { key: string; label: string; candidates: string[]; alone: boolean }[] =
  CANDIDATES.length === 0
    ? []
    : [
        ...(CANDIDATES.length > 1
          ? CANDIDATES.map((c) => ({ key: `ours_${c}`, label: `ours, candidate: ${labelOf(c)}`, candidates: [c], alone: true }))
          : []),
        {
          key: 'oursCandidates',
          label: CANDIDATES.length > 1 ? 'ours, candidates: all together' : `ours, candidate: ${labelOf(CANDIDATES[0]!)}`,
          candidates: CANDIDATES,
          alone: false,
        },
      ];

/** The systems measured, in the report's order; a label and a drain of `count` messages on `url`. */
function systems(ctx: BenchContext): WalSystem[] {
  const { P } = ctx;
  const keyed = P.pgBossConfigs.find((c) => c.keyed) ?? { batchSize: 5_000, workers: 1, keyed: true };
  const plain = P.pgBossConfigs.find((c) => !c.keyed && c.workers === 1) ?? { batchSize: 5_000, workers: 1 };
  return [
    {
      key: 'ours',
      label: 'ours (a key per message)',
      drain: (url, count) => oursDrain(url, { topic: 'bench.noop', count, processes: 1, env: OURS_THROUGHPUT }),
    },
    {
      key: 'pgBossKeyed',
      label: `pg-boss key_strict_fifo, completed kept (batch ${n(keyed.batchSize)})`,
      drain: (url, count, run) => pgBossDrain(url, count, run, keyed),
    },
    { key: 'graphileKeyed', label: 'graphile-worker, a queue per key', drain: (url, count) => graphileRunDrain(url, count, true) },
    {
      key: 'pgBoss',
      label: `pg-boss standard queue (batch ${n(plain.batchSize)})`,
      drain: (url, count, run) => pgBossDrain(url, count, run, plain),
    },
    { key: 'graphile', label: 'graphile-worker, no queue', drain: (url, count) => graphileRunDrain(url, count, false) },
    ...CANDIDATE_ROWS.filter((c) => P.walCandidates === 'each' || !c.alone).map((c) => ({
      key: c.key,
      label: c.label,
      prepare: (url: string) => withClient(url, (client) => applyStorageCandidates(client, c.candidates)),
      drain: (url: string, count: number) => oursDrain(url, { topic: 'bench.noop', count, processes: 1, env: OURS_THROUGHPUT }),
    })),
  ];
}

export const walSection = {
  name: 'wal',
  markdown: [{ place: 4.6, render: walMarkdown }],
  async run(ctx: BenchContext) {
    const { P, log } = ctx;
    const M = P.walMessages;
    const fresh = { ours: ctx.freshOurs, pgBoss: ctx.freshPgBoss, graphile: ctx.freshGraphile };
    const configs = systems(ctx).map((s) => ({
      key: s.key,
      label: s.label,
      async measure(r: number): Promise<WalPerMessage> {
        const url = await (s.key.startsWith('ours') ? fresh.ours : s.key.startsWith('pgBoss') ? fresh.pgBoss : fresh.graphile)();
        await s.prepare?.(url);
        const { wal } = await walAround(url, () => s.drain(url, M, r));
        return { walBytes: wal.bytes / M, indexEntries: wal.btreeEntries / M, records: wal.records / M };
      },
    }));
    const show = (w: WalPerMessage) => `${Math.round(w.walBytes)} B, ${w.indexEntries.toFixed(1)} index entries a message`;
    const measured = Object.entries(await measureEach(P.walRuns, configs, { log, show }));
    return { wal: { messages: M, systems: Object.fromEntries(measured.map(([k, c]) => [k, { label: c.label, ...c.runs }])) } };
  },
};

function walMarkdown(r: PartOf<typeof walSection>): string[] {
  const L = ['## 4c. What a message writes, insert to completion (WAL and index entries)', ''];
  const w = r.wal;
  if (!w) return [...L, 'Not measured (the section failed or was left out).', ''];
  const ours = w.systems.ours?.median.walBytes;
  L.push(
    `${n(w.messages)} messages ({ i }, a key each where the system has keys) inserted in bulk and drained by one process, on a fresh database; this database's WAL only (pg_walinspect), after a CHECKPOINT; medians of ${r.params.walRuns} interleaved runs (min–max). Index entries: B-tree leaf inserts.`,
    '',
    '| System | WAL bytes / message | vs ours | index entries / message | WAL records / message |',
    '|---|---:|---:|---:|---:|',
  );
  for (const s of Object.values(w.systems)) {
    const ratio = ours ? `${n(s.median.walBytes / ours, 2)}×` : '—';
    L.push(`| ${s.label} | ${mm(s, 'walBytes')} | ${ratio} | ${mm(s, 'indexEntries', 1)} | ${mm(s, 'records', 1)} |`);
  }
  L.push('');
  return L;
}
