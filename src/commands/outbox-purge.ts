import { MAX_RETENTION_DAYS } from '../config.ts';
import { createDatabase } from '../db/client.ts';
import { purgeOutbox } from '../outbox/index.ts';
import { optionalWholeNumberFlag } from '../process/flags.ts';
import { runMain, type Command } from '../process/run-main.ts';

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

  --days N   delete DONE messages processed more than N days ago, 0 to ${MAX_RETENTION_DAYS}
             (default OUTBOX_RETENTION_DAYS)`,
  options: { days: { type: 'string' } },
  async run({ flags, config, out }) {
    const days = optionalWholeNumberFlag('days', flags.days, { min: 0, max: MAX_RETENTION_DAYS });
    const retentionDays = days ?? config.OUTBOX_RETENTION_DAYS;
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
