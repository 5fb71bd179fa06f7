import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { journalOrderProblems, readJournal, restampLast, writeJournal } from '../src/db/migration-order.ts';
import { runMain, UsageError, type Command } from '../src/process/run-main.ts';

/*
 * `npm run migration:new -- <name> [--custom]`: `drizzle-kit generate` (the schema's changes, or an
 * empty migration to write by hand), then the new journal entry's "when" stamp put above the one
 * before it. drizzle-kit stamps with the clock, and our journal's stamps may be ahead of it: a
 * migration stamped lower than one a database already applied is skipped there (ADR 0042).
 */
export const migrationNewCommand: Command = {
  name: 'migration:new',
  usage: `usage: npm run migration:new -- <name> [--custom]

  <name>     the migration's name after its number: lower case, digits and _ (0015_<name>.sql)
  --custom   an empty migration for SQL drizzle-kit cannot express (EXCLUDE, functions)`,
  options: { custom: { type: 'boolean' } },
  allowPositionals: true,
  async run({ flags, positionals, out }) {
    const [name, ...rest] = positionals;
    if (!name || rest.length) throw new UsageError('give the migration one name');
    if (!/^[a-z0-9_]+$/.test(name)) throw new UsageError(`the name "${name}" may hold only a-z, 0-9 and _`);
    const cwd = process.cwd();
    const migrationsDir = path.join(cwd, 'migrations');
    const before = readJournal(migrationsDir).entries.length;

    // npm runs a script in the package's folder: its drizzle-kit, as `npx drizzle-kit` would find it.
    const drizzleKit = path.join(cwd, 'node_modules', 'drizzle-kit', 'bin.cjs');
    const args = [drizzleKit, 'generate', `--name=${name}`, ...(flags.custom ? ['--custom'] : [])];
    const generated = spawnSync(process.execPath, args, { cwd, stdio: 'inherit' });
    if (generated.status !== 0) throw new Error(`drizzle-kit generate failed (${generated.signal ?? generated.status})`);

    const journal = readJournal(migrationsDir);
    if (journal.entries.length === before) {
      out('migration:new: drizzle-kit wrote no migration (no schema change; --custom writes an empty one)');
      return 1;
    }
    const restamped = restampLast(journal);
    if (restamped) {
      writeJournal(migrationsDir, journal);
      out(
        `migration:new: ${restamped.entry.tag} restamped from ${restamped.was} to ${restamped.entry.when}, above the migration before it`,
      );
    }
    const problems = journalOrderProblems(journal.entries);
    if (problems.length) throw new Error(`the journal is out of order: ${problems.join('; ')}`);
    out(`migration:new: wrote migrations/${journal.entries.at(-1)!.tag}.sql; commit it with migrations/meta/`);
    return 0;
  },
};

runMain(migrationNewCommand, import.meta.url);
