import { ConfigError } from '../config.ts';
import { runMigrations } from '../db/migrate.ts';
import { ensureWalSlot } from '../outbox/index.ts';
import { refuseTransactionPooler } from '../db/pooler.ts';
import { runMain, type Command } from '../process/run-main.ts';

/** `npm run migrate`: applies pending migrations to DATABASE_URL (or the embedded server's address). */
export const migrateCommand: Command = {
  name: 'migrate',
  usage: 'usage: npm run migrate\n\nApplies the pending migrations (migrations/) to DATABASE_URL, or to the embedded server.',
  async run({ config, out }) {
    // runMigrations holds a session-level advisory lock across the migration's own transactions.
    if (config.DATABASE_POOLER === 'transaction') {
      throw new ConfigError([refuseTransactionPooler('npm run migrate', 'its lock belongs to a session')]);
    }
    await runMigrations(config.DATABASE_URL);
    out('migrations applied');
    if (config.OUTBOX_WRITES === 'wal') {
      const { made } = await ensureWalSlot(config.DATABASE_URL, config.OUTBOX_SLOT);
      out(`replication slot ${config.OUTBOX_SLOT} ${made ? 'made' : 'in place'} (OUTBOX_WRITES=wal)`);
    }
    return 0;
  },
};

runMain(migrateCommand, import.meta.url);
