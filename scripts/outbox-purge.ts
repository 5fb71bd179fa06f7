import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.ts';
import { createDatabase } from '../src/db/client.ts';
import { purgeDone } from '../src/outbox/purge.ts';

/*
 * `npm run outbox:purge [-- --days N]`: deletes DONE messages processed more than N days ago
 * (default OUTBOX_RETENTION_DAYS), 1,000 rows a statement (see src/outbox/purge.ts). The running
 * worker does the same every OUTBOX_PURGE_INTERVAL_SECONDS; this is for cron or a one-off.
 * PENDING and DEAD messages are never touched.
 */

async function main(): Promise<number> {
  let days: number | undefined;
  try {
    const { values } = parseArgs({ options: { days: { type: 'string' } }, strict: true });
    if (values.days !== undefined) {
      if (!/^\d+$/.test(values.days)) throw new Error(`--days must be a whole number (got "${values.days}")`);
      days = Number(values.days);
    }
  } catch (e) {
    process.stderr.write(`outbox:purge: ${(e as Error).message}\nusage: npm run outbox:purge [-- --days N]\n`);
    return 2;
  }
  const config = loadConfig();
  const retentionDays = days ?? config.OUTBOX_RETENTION_DAYS;
  const database = createDatabase(config.DATABASE_URL, { max: 1, applicationName: 'stayhub-outbox-purge' });
  try {
    const started = Date.now();
    const purged = await purgeDone(database.db, { retentionDays, batchSize: 1000 });
    process.stdout.write(
      `outbox:purge: deleted ${purged} DONE message(s) older than ${retentionDays} day(s) in ${Date.now() - started} ms\n`,
    );
    return 0;
  } catch (e) {
    process.stderr.write(`outbox:purge: ${(e as Error).message}\n`);
    return 1;
  } finally {
    await database.close();
  }
}

main().then((code) => (process.exitCode = code));
