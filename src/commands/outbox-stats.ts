import { createDatabase } from '../db/client.ts';
import { outboxStats, walSlotState, type OutboxStats, type WalSlotState } from '../outbox/index.ts';
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

const bytes = (n: number) => (n < 1024 ** 2 ? `${Math.round(n / 1024)} KiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`);

/**
 * OUTBOX_WRITES=wal: the messages not yet rows wait in the WAL, behind the slot, and the table's
 * numbers do not count them. How far behind the slot is says whether the worker keeps up.
 */
export function formatWalSlot(slot: string, state: WalSlotState | null): string {
  if (!state) return `replication slot ${slot}: missing (OUTBOX_WRITES=wal writes messages nobody will read)`;
  return `replication slot ${slot}: ${bytes(state.behindBytes)} of WAL not yet read by the worker (wal_status ${state.walStatus})`;
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
      const slot = config.OUTBOX_WRITES === 'wal' ? await walSlotState(database.db, config.OUTBOX_SLOT) : undefined;
      if (flags.json) {
        out(JSON.stringify(slot === undefined ? stats : { ...stats, walSlot: slot && { name: config.OUTBOX_SLOT, ...slot } }, null, 2));
      } else {
        out(formatStats(stats));
        if (slot !== undefined) out(formatWalSlot(config.OUTBOX_SLOT, slot));
      }
      return 0;
    } finally {
      await database.close();
    }
  },
};

runMain(statsCommand, import.meta.url);
