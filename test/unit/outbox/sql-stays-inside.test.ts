import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { matchingCodeLines, repoRoot as root, sourceFiles } from '../../helpers/source-lines.ts';

/*
 * The outbox's tables and SQL functions are the outbox's: outside src/outbox/ (which holds their
 * definition, src/outbox/schema.ts, and their migrations, src/outbox/migrations/) nothing writes
 * SQL that names them, the application's migrations from the one that handed them over included. The events path asks outbox verbs
 * (src/outbox/index.ts), tests, the bench and the chaos run write and read rows through
 * src/outbox/testing.ts. The dependency rules (.dependency-cruiser.cjs) keep the imports to those
 * two files; this keeps the SQL: it greps src/, scripts/ and test/helpers/ for statements naming
 * an outbox object (every table, partition, index and function whose name starts with `outbox`,
 * as the migrations make them), comments left out.
 *
 * The exceptions, each for a reason:
 * - scripts/bench/api-pgbench.ts: pgbench's plain-SQL replica of the booking transaction, which
 *   must stay one script pgbench runs.
 */

const SCANNED = ['src', 'scripts', 'test/helpers'];
const OWNER = 'src/outbox/';
const EXCEPTIONS = new Set(['scripts/bench/api-pgbench.ts']);

const sqlFiles = (dir: string) =>
  readdirSync(path.join(root, dir))
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .map((f) => ({ file: `${dir}/${f}`, text: readFileSync(path.join(root, dir, f), 'utf8') }));
/** The application's migrations from the one that handed the outbox's tables to the outbox. */
const HANDED_OVER = '0019_outbox_keeps_its_own_tables.sql';
const appMigrations = sqlFiles('migrations');
const migrations = [...appMigrations, ...sqlFiles('src/outbox/migrations')].map((m) => m.text).join('\n');
/** The SQL functions the migrations make: outbox_turn, outbox_ensure_partitions, outbox_uuid_v7, … */
const FUNCTIONS = [
  ...new Set([...migrations.matchAll(/create\s+(?:or\s+replace\s+)?function\s+(outbox\w*)/gi)].map((m) => m[1]!.toLowerCase())),
];

/** An outbox relation: the table, a day partition (outbox_YYYYMMDD, outbox_before), outbox_audit, an index, the sequence. */
const RELATION = String.raw`(?:public\.)?"?outbox\w*"?`;
const SQL_NAMING_OUTBOX = [
  // a relation where SQL names one: from, into, update, join, table, truncate, vacuum, analyze, …
  new RegExp(String.raw`\b(from|into|update|join|table|truncate|vacuum|analyze|only|partition\s+of|like)\s+${RELATION}\b`, 'i'),
  // a relation by its name as a literal: 'outbox'::regclass, pg_partition_tree('outbox_key_idx'), to_regclass('outbox')
  /'outbox\w*'(::regclass|\s*\))/i,
  // a call of one of the outbox's SQL functions
  new RegExp(String.raw`\b(${FUNCTIONS.join('|')})\s*\(`, 'i'),
];

/** The lines of `text` that name an outbox object in SQL, comments left out. */
const offendingLines = (text: string): string[] => matchingCodeLines(text, SQL_NAMING_OUTBOX);

describe('SQL naming the outbox stays in src/outbox/', () => {
  it('knows the outbox objects the migrations make, and recognises SQL that names them', () => {
    expect(FUNCTIONS).toEqual(expect.arrayContaining(['outbox_turn', 'outbox_ensure_partitions', 'outbox_uuid_v7']));
    for (const sql of [
      'insert into outbox (topic, key, payload) values ($1, $2, $3)',
      "select count(*) from outbox where status = 'PENDING'",
      '  join outbox o on o.id = x.id',
      'truncate outbox, outbox_audit',
      'vacuum analyze outbox',
      'alter table outbox detach partition outbox_20261206',
      "select exists (select 1 from pg_inherits where inhparent = 'outbox'::regclass)",
      "select pg_relation_size(relid) from pg_partition_tree('outbox_key_idx')",
      'select outbox_turn($1, $2)',
      'values (outbox_uuid_v7()::text)',
      'select outbox_ensure_partitions() as made',
    ]) {
      expect(offendingLines(sql), sql).toEqual([sql]);
    }
    for (const text of [
      ' * Walked by processed_at through outbox_done_processed_idx (every partition), from outbox rows',
      '// the outbox: from outbox_turn',
      "await c.query(`select pg_notify('outbox', $1)`, [topic]);",
      "import { enqueue } from '../outbox/index.ts';",
      "log.info('outbox worker started');",
    ]) {
      expect(offendingLines(text), text).toEqual([]);
    }
  });

  it('appears nowhere in src/, scripts/ or test/helpers/ outside src/outbox/ and the named exceptions', () => {
    const files = SCANNED.flatMap(sourceFiles);
    expect(files).toContain('src/outbox/testing.ts');
    const offenders = files
      .filter((f) => !f.startsWith(OWNER) && !EXCEPTIONS.has(f))
      .flatMap((f) => offendingLines(readFileSync(path.join(root, f), 'utf8')).map((line) => `${f}: ${line.trim()}`));
    expect(offenders).toEqual([]);
  });

  it("appears in no application migration since the outbox's own took over", () => {
    const since = appMigrations.findIndex((m) => m.file.endsWith(HANDED_OVER));
    expect(since).toBeGreaterThan(0);
    const offenders = appMigrations
      .slice(since)
      .flatMap((m) => offendingLines(m.text.replace(/--.*$/gm, '')).map((line) => `${m.file}: ${line.trim()}`));
    expect(offenders).toEqual([]);
    // and the check reads SQL: the statement that made the outbox's claim index would be caught
    const before = appMigrations.find((m) => m.file.includes('0014_'))!.text.replace(/--.*$/gm, '');
    expect(offendingLines(before)).not.toEqual([]);
  });

  it('its exceptions still name the outbox (an exception that no longer needs to be one is removed)', () => {
    for (const f of EXCEPTIONS) expect(offendingLines(readFileSync(path.join(root, f), 'utf8')), f).not.toEqual([]);
  });
});
