import { runMigrations } from '../src/db/migrate.ts';
import { runMain, type Command } from '../src/process/run-main.ts';

/** `npm run migrate`: applies pending migrations to DATABASE_URL (or the embedded server's address). */
export const migrateCommand: Command = {
  name: 'migrate',
  usage: 'usage: npm run migrate\n\nApplies the pending migrations (migrations/) to DATABASE_URL, or to the embedded server.',
  async run({ config, out }) {
    await runMigrations(config.DATABASE_URL);
    out('migrations applied');
    return 0;
  },
};

runMain(migrateCommand, import.meta.url);
