import { createDatabase } from '../src/db/client.ts';
import { purgeOutbox } from '../src/outbox/index.ts';
import { runMain, UsageError, type Command } from '../src/process/run-main.ts';

/*
 * `npm run outbox:purge [-- --days N]`: removes DONE messages processed more than N days ago
 * (default OUTBOX_RETENTION_DAYS): whole days' partitions where every row is such a message, the
 * rest 1,000 rows a statement (see src/outbox/purge.ts). The running
 * worker does the same every HOUSEKEEPING_INTERVAL_SECONDS; this is for cron or a one-off.
 * PENDING and DEAD messages are never touched.
 */
export const purgeCommand: Command = {
  name: 'outbox:purge',
  usage: `usage: npm run outbox:purge [-- --days N]

  --days N   delete DONE messages processed more than N days ago (default OUTBOX_RETENTION_DAYS)`,
  options: { days: { type: 'string' } },
  async run({ flags, config, out }) {
    const days = flags.days as string | undefined;
    if (days !== undefined && !/^\d+$/.test(days)) throw new UsageError(`--days must be a whole number (got "${days}")`);
    const retentionDays = days === undefined ? config.OUTBOX_RETENTION_DAYS : Number(days);
    const database = createDatabase(config.DATABASE_URL, {
      max: 1,
      applicationName: 'stayhub-outbox-purge',
      pooler: config.DATABASE_POOLER,
    });
    try {
      const started = Date.now();
      const purged = await purgeOutbox(database.db, { retentionDays, batchSize: 1000 });
      const whole = purged.partitions.length ? ` (${purged.partitions.length} day partition(s) dropped whole)` : '';
      out(`outbox:purge: deleted ${purged.rows} DONE message(s) older than ${retentionDays} day(s)${whole} in ${Date.now() - started} ms`);
      return 0;
    } finally {
      await database.close();
    }
  },
};

runMain(purgeCommand, import.meta.url);
