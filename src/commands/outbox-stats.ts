import { createDatabase } from '../db/client.ts';
import { outboxStats, type OutboxStats } from '../outbox/index.ts';
import { runMain, type Command } from '../process/run-main.ts';

/*
 * `npm run outbox:stats [-- --json]`: the outbox's numbers, per topic and in total, the same ones
 * GET /health reports: pending (incl. leased and backing off), leased (a worker holds it now),
 * dead, done in the last hour, and the age of the oldest pending message, the number that says
 * "the worker is stuck or down".
 */

const age = (s: number | null) =>
  s === null ? '-' : s < 120 ? `${s}s` : s < 7200 ? `${Math.round(s / 60)}m` : `${(s / 3600).toFixed(1)}h`;

export function formatStats(s: OutboxStats): string {
  const header = ['topic', 'pending', 'leased', 'dead', 'done 1h', 'oldest pending'];
  const rows = [
    ...s.byTopic.map((t) => [t.topic, t.pending, t.leased, t.dead, t.doneLastHour, age(t.oldestPendingAgeSeconds)]),
    ['TOTAL', s.pending, s.leased, s.dead, s.doneLastHour, age(s.oldestPendingAgeSeconds)],
  ].map((r) => r.map(String));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  const table = [line(header), ...rows.map(line)].join('\n');
  // No topic row: nothing pending, dead or done within the hour. Said in words, so an empty table
  // does not read as a query that found nothing because it looked in the wrong place.
  return s.byTopic.length ? table : `${table}\nnone: no message pending or dead, and none done in the last hour`;
}

export const statsCommand: Command = {
  name: 'outbox:stats',
  usage: `usage: npm run outbox:stats [-- --json]

  --json   the numbers as JSON instead of a table`,
  options: { json: { type: 'boolean' } },
  async run({ flags, config, out }) {
    const database = createDatabase(config.DATABASE_URL, {
      max: 1,
      applicationName: 'stayhub-outbox-stats',
      pooler: config.DATABASE_POOLER,
    });
    try {
      const stats = await outboxStats(database.db);
      out(flags.json ? JSON.stringify(stats, null, 2) : formatStats(stats));
      return 0;
    } finally {
      await database.close();
    }
  },
};

runMain(statsCommand, import.meta.url);
