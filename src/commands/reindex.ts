import { createDatabase } from '../db/client.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../search/postgres-search-index.ts';
import { wholeNumberFlag } from '../process/flags.ts';
import { runMain, type Command } from '../process/run-main.ts';
import { reindex, type ReindexProgress, type ReindexSummary } from '../search/reindex.ts';

/*
 * `npm run reindex [-- --batch-size N]`: rebuilds the search index from the properties table,
 * in place, while the API keeps serving (see src/search/reindex.ts).
 *
 * On a terminal: a live line with count, rate and ETA. Otherwise (CI, cron, a pipe): one summary
 * line at the end. Ctrl-C finishes the batch in flight and exits 130 with the summary so far; a
 * second Ctrl-C exits at once (the batch in flight rolls back — the index stays consistent).
 */

const HELP = `usage: npm run reindex [-- --batch-size N]
Rebuilds the search index from the properties table without emptying it first.`;

const n = (x: number) => Math.round(x).toLocaleString('en-US');
const secs = (ms: number) => (ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms / 1000)}s`);
const rate = (p: ReindexProgress) => (p.elapsedMs > 0 ? (p.done / p.elapsedMs) * 1000 : 0);

function progressLine(p: ReindexProgress): string {
  if (p.pass === 'sweep') return `reindex: sweeping documents of removed properties… ${n(p.removed)} removed`;
  const r = rate(p);
  const pct = p.total ? Math.min(100, (p.done / p.total) * 100).toFixed(0) : '100';
  const eta = r > 0 && p.total > p.done ? secs(((p.total - p.done) / r) * 1000) : '—';
  return `reindex: ${n(p.done)}/${n(p.total)} (${pct}%) · ${n(r)}/s · ETA ${eta}`;
}

function summaryLine(s: ReindexSummary): string {
  return (
    `reindex ${s.interrupted ? 'INTERRUPTED' : 'done'}: ${n(s.done)}/${n(s.total)} properties in ${secs(s.elapsedMs)} ` +
    `(${n(rate(s))}/s) · ${n(s.written)} written, ${n(s.unchanged)} unchanged, ${n(s.removed)} removed · ` +
    `${n(s.documents)} documents in the index`
  );
}

export const reindexCommand: Command = {
  name: 'reindex',
  usage: `${HELP}

  --batch-size N   properties per batch, 1 to 10000 (default 500)
Ctrl-C (or SIGTERM) finishes the current batch and stops (exit 130); a second one stops at once.`,
  options: { 'batch-size': { type: 'string', default: '500' } },
  longRunning: true,
  async run({ flags, config, stopRequested }) {
    const batchSize = wholeNumberFlag('batch-size', String(flags['batch-size']), { min: 1, max: 10_000 });
    const db = createDatabase(config.DATABASE_URL, { max: 2, applicationName: 'stayhub-reindex', pooler: config.DATABASE_POOLER });
    const searchIndex = createPostgresSearchIndex({ ...searchIndexOptions(config), max: 2, applicationName: 'stayhub-reindex' });
    const tty = process.stdout.isTTY === true;
    const stop = new AbortController();
    void stopRequested.then(() => {
      stop.abort();
      process.stderr.write(`${tty ? '\n' : ''}reindex: finishing the current batch, then stopping (Ctrl-C again to stop now)\n`);
    });

    let lastDraw = 0;
    try {
      const summary = await reindex({
        db: db.db,
        searchIndex,
        batchSize,
        signal: stop.signal,
        onProgress: (p) => {
          const now = Date.now();
          if (!tty || now - lastDraw < 100) return;
          lastDraw = now;
          process.stdout.write(`\r\x1b[K${progressLine(p)}`);
        },
      });
      if (tty) process.stdout.write('\r\x1b[K');
      process.stdout.write(`${summaryLine(summary)}\n`);
      return summary.interrupted ? 130 : 0;
    } finally {
      await searchIndex.close();
      await db.close();
    }
  },
};

runMain(reindexCommand, import.meta.url);
