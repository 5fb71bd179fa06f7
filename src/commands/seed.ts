import { ConfigError, type Config } from '../config.ts';
import { createDatabase, describeDb } from '../db/client.ts';
import { runMigrations } from '../db/migrate.ts';
import { refuseTransactionPooler } from '../db/pooler.ts';
import { isDatabaseUnavailable } from '../db/pg-errors.ts';
import { SeedRefusedError, seedDemo } from '../demo/seed.ts';
import { runMain, type Command } from '../process/run-main.ts';

/*
 * `npm run seed [-- --force]`: demo data (src/demo/seed.ts) in the database `npm start` runs (or
 * DATABASE_URL's). Run it beside a running `npm start`: the worker then sends the emails and
 * indexes the properties within a second. Idempotent: a second run adds nothing.
 *
 * Exit codes: 0 seeded (or nothing to add) · 1 the database is unreachable or a write failed ·
 * 2 bad flags or configuration · 3 the database holds non-demo data (use --force), or a demo
 * address belongs to someone else's account.
 */

const USAGE = 'usage: npm run seed [-- --force]   (--force: seed even if the database holds non-demo users)';

export const seedCommand: Command = {
  name: 'seed',
  usage: `${USAGE}

Exit codes: 0 seeded (or nothing to add) · 1 the database is unreachable or a write failed ·
2 bad flags or configuration · 3 the database holds non-demo data (use --force), or a demo
address belongs to someone else's account (remove or rename it).`,
  options: { force: { type: 'boolean' } },
  run: ({ flags, config }) => seed(config, flags.force === true),
};

async function seed(config: Config, force: boolean): Promise<number> {
  // It migrates first (below), and the migration's lock belongs to a session.
  if (config.DATABASE_POOLER === 'transaction') {
    throw new ConfigError([refuseTransactionPooler('npm run seed', 'it migrates first, under a session-level lock')]);
  }
  const where = describeDb(config.DATABASE_URL);
  const database = createDatabase(config.DATABASE_URL, { max: 2, applicationName: 'stayhub-seed', pooler: config.DATABASE_POOLER });
  try {
    // A database the seed is pointed at may be new (DATABASE_URL): the schema first. A no-op otherwise.
    await runMigrations(config.DATABASE_URL);
    const result = await seedDemo(
      { db: database.db, serviceFeePercent: config.SERVICE_FEE_PERCENT, idempotencyTtlHours: config.IDEMPOTENCY_TTL_HOURS },
      { force },
    );
    const c = result.created;
    const added = c.users + c.properties + c.bookings + c.cancellations;
    process.stdout.write(
      added === 0
        ? `seed: the demo data is already in ${where}; nothing added\n`
        : `seed: added to ${where}: ${c.users} users, ${c.properties} properties, ${c.bookings} bookings, ${c.cancellations} cancellation(s)\n`,
    );
    process.stdout.write('demo accounts (sign in with POST /auth/login; the admin also at /admin):\n');
    for (const a of result.accounts) process.stdout.write(`  ${a.role.padEnd(6)} ${a.email.padEnd(28)} password: ${a.password}\n`);
    if (added > 0)
      process.stdout.write('the worker (npm start) now sends the emails and indexes the properties: try GET /search?city=Lisbon\n');
    return 0;
  } catch (e) {
    if (e instanceof SeedRefusedError) {
      process.stderr.write(`seed: refused: ${e.message}\n`);
      return 3;
    }
    if (isDatabaseUnavailable(e)) {
      process.stderr.write(
        `seed: cannot reach the database at ${where}: start it first (npm start in another terminal) or set DATABASE_URL\n`,
      );
      return 1;
    }
    // Only the root cause's code and message: drizzle's own message quotes the query's parameters.
    let cause: unknown = e;
    while ((cause as { cause?: unknown }).cause) cause = (cause as { cause?: unknown }).cause;
    const { code, message } = cause as { code?: string; message?: string };
    process.stderr.write(`seed: failed${code ? ` (${code})` : ''}: ${message ?? String(cause)}\n`);
    return 1;
  } finally {
    await database.close();
  }
}

runMain(seedCommand, import.meta.url);
