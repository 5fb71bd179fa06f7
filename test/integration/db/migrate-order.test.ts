import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR, runMigrations } from '../../../src/db/migrate.ts';
import { readJournal, writeJournal } from '../../../src/db/migration-order.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { ROOT, runScript, scriptEnv } from '../../helpers/npm-run.ts';

/*
 * drizzle applies a journal entry only when its "when" is above the newest applied one
 * (src/db/migration-order.ts): `migrate` must refuse what drizzle would skip or misorder, and
 * `npm run migration:new` must stamp a new migration where drizzle will apply it.
 */

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function database(): Promise<TestDatabase> {
  const db = await createTestDatabase('migorder');
  cleanups.push(() => db.drop());
  return db;
}

/** A copy of migrations/ in a temporary folder, for a test to add to or restamp. */
function migrationsCopy(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-migrations-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(MIGRATIONS_DIR, dir, { recursive: true });
  return dir;
}

/** Appends `tag` with `sql` to the copy's journal, stamped `when` (as drizzle-kit appends an entry). */
function addMigration(dir: string, tag: string, sql: string, when: number): void {
  const journal = readJournal(dir);
  journal.entries.push({ idx: journal.entries.length, when, tag, version: '7', breakpoints: true } as (typeof journal.entries)[number]);
  writeJournal(dir, journal);
  writeFileSync(path.join(dir, `${tag}.sql`), sql);
}

const tableExists = async (db: TestDatabase, name: string) =>
  (await db.pool.query<{ t: string | null }>('select to_regclass($1) as t', [name])).rows[0]!.t !== null;

const appliedCount = async (db: TestDatabase) =>
  (await db.pool.query<{ n: number }>('select count(*)::int as n from drizzle.__drizzle_migrations')).rows[0]!.n;

describe('migrate refuses an order drizzle would get wrong', () => {
  it('refuses a migration drizzle-kit stamped below the one before it (drizzle would skip it), applying nothing', async () => {
    const db = await database();
    const dir = migrationsCopy();
    const { entries } = readJournal(dir);
    // drizzle-kit stamps with the clock; the journal's last stamp is ahead of it.
    const clock = Math.min(Date.now(), entries.at(-1)!.when - 1);
    const tag = `${String(entries.length).padStart(4, '0')}_late_probe`;
    addMigration(dir, tag, 'create table late_probe (id int);', clock);
    const before = await appliedCount(db);

    await expect(runMigrations(db.url, dir)).rejects.toThrow(
      new RegExp(`^refusing to migrate: .*: ${tag} is stamped ${clock}, not above ${entries.at(-1)!.tag}'s ${entries.at(-1)!.when}\\.`),
    );
    expect(await tableExists(db, 'late_probe')).toBe(false);
    expect(await appliedCount(db)).toBe(before);
  });

  it('refuses a journal entry not applied yet stamped below the newest applied one', async () => {
    const db = await database();
    const dir = migrationsCopy();
    const journal = readJournal(dir);
    const last = journal.entries.at(-1)!;
    // Applied elsewhere first: a branch's migration stamped later than this journal's last one.
    await db.pool.query('delete from drizzle.__drizzle_migrations where created_at = $1', [last.when]);
    await db.pool.query(`insert into drizzle.__drizzle_migrations (hash, created_at) values ('elsewhere', $1)`, [last.when + 1000]);

    await expect(runMigrations(db.url, dir)).rejects.toThrow(
      `refusing to migrate: ${last.tag} (stamped ${last.when}) not applied, yet stamped at or below ${last.when + 1000}, the newest migration this database has applied: drizzle would skip it.`,
    );
  });

  it('refuses a journal whose stamps do not increase with idx, before applying anything', async () => {
    const db = await database();
    // A database with no migration yet: the journal's own order is what is checked.
    await db.pool.query('drop schema drizzle cascade');
    await db.pool.query('drop schema public cascade');
    await db.pool.query('create schema public');
    const dir = migrationsCopy();
    const journal = readJournal(dir);
    const [first, second] = journal.entries;
    second!.when = first!.when;
    writeJournal(dir, journal);

    await expect(runMigrations(db.url, dir)).rejects.toThrow(
      `refusing to migrate: migrations/meta/_journal.json's "when" stamps must increase with idx (drizzle applies by stamp): ${second!.tag} is stamped ${first!.when}, not above ${first!.tag}'s ${first!.when}`,
    );
    expect(await tableExists(db, 'users')).toBe(false);
    expect(await tableExists(db, 'drizzle.__drizzle_migrations')).toBe(false);
  });

  it('`npm run migrate` exits non-zero, saying which migration it would have skipped', async () => {
    const db = await database();
    const { entries } = readJournal(MIGRATIONS_DIR);
    const last = entries.at(-1)!;
    // As a database migrated by a branch whose migration is stamped later, that has not applied
    // this journal's last one: drizzle would never apply it there.
    await db.pool.query('delete from drizzle.__drizzle_migrations where created_at = $1', [last.when]);
    await db.pool.query(`insert into drizzle.__drizzle_migrations (hash, created_at) values ('elsewhere', $1)`, [last.when + 1000]);

    const run = await runScript('src/commands/migrate.ts', [], scriptEnv({ DATABASE_URL: db.url, ENV_FILE: '' }));
    expect(run.code, run.stderr).toBe(1);
    expect(run.stdout).not.toContain('migrations applied');
    expect(run.stderr).toContain(
      `migrate: refusing to migrate: ${last.tag} (stamped ${last.when}) not applied, yet stamped at or below ${last.when + 1000}`,
    );
    expect(run.stderr).toContain('npm run migration:new');
  }, 60_000);

  it('migrates a database at the head of the journal as before', async () => {
    const db = await database();
    const before = await appliedCount(db);
    const run = await runScript('src/commands/migrate.ts', [], scriptEnv({ DATABASE_URL: db.url, ENV_FILE: '' }));
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('migrations applied');
    expect(await appliedCount(db)).toBe(before);
  }, 60_000);
});

describe('npm run migration:new', () => {
  it('stamps the migration drizzle-kit writes above the last one, so migrate applies it', async () => {
    const db = await database();
    // drizzle-kit writes into ./migrations of the folder it runs in: a copy of what it reads.
    const copy = mkdtempSync(path.join(os.tmpdir(), 'stayhub-migration-new-'));
    cleanups.push(() => rmSync(copy, { recursive: true, force: true }));
    for (const f of ['drizzle.config.ts', 'package.json', 'tsconfig.json', 'src/db/schema', 'migrations']) {
      cpSync(path.join(ROOT, f), path.join(copy, f), { recursive: true });
    }
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules'));
    const before = readJournal(path.join(copy, 'migrations')).entries;

    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', path.join(ROOT, 'scripts/migration-new.ts'), 'probe_table', '--custom'],
      { cwd: copy, env: { ...process.env, ENV_FILE: '', NO_COLOR: '1' } },
    );
    const after = readJournal(path.join(copy, 'migrations')).entries;
    expect(after).toHaveLength(before.length + 1);
    const added = after.at(-1)!;
    expect(added.tag).toBe(`${String(before.length).padStart(4, '0')}_probe_table`);
    expect(added.when).toBeGreaterThan(before.at(-1)!.when);
    expect(stdout).toContain(`wrote migrations/${added.tag}.sql`);
    expect(readdirSync(path.join(copy, 'migrations'))).toContain(`${added.tag}.sql`);

    const file = path.join(copy, 'migrations', `${added.tag}.sql`);
    writeFileSync(file, `${readFileSync(file, 'utf8')}\ncreate table probe_table (id int);\n`);
    await runMigrations(db.url, path.join(copy, 'migrations'));
    expect(await tableExists(db, 'probe_table')).toBe(true);
  }, 120_000);
});
