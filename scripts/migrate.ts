import { loadConfig } from '../src/config.ts';
import { runMigrations } from '../src/db/migrate.ts';

/** `npm run migrate`: applies pending migrations to DATABASE_URL (or the embedded server's address). */
const config = loadConfig();
runMigrations(config.DATABASE_URL)
  .then(() => process.stdout.write('migrations applied\n'))
  .catch((err) => {
    process.stderr.write(`migration failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
