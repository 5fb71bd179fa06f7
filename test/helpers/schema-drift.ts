import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { is, SQL } from 'drizzle-orm';
import { getTableConfig, PgDialect, PgTable, type IndexedColumn } from 'drizzle-orm/pg-core';
import type pg from 'pg';
import * as appSchema from '../../src/db/schema.ts';
import { outbox, outboxAudit, outboxMigrationRecords, outboxWalPosition } from '../../src/outbox/testing.ts';

/** Every table a migrated database should hold: the application's and the outbox's own. */
const schema = { ...appSchema, outbox, outboxAudit, outboxMigrationRecords, outboxWalPosition };

/*
 * Whether the migrations, their saved snapshots and the schema (src/db/schema/) still agree, checked two ways
 * (test/integration/db/schema-drift.test.ts): drizzle-kit, run on a copy of the tree, finds nothing to
 * generate (the snapshots match the schema); and a migrated database holds the tables, columns and
 * indexes the schema declares, no fewer and no more (the SQL matches the schema, which matters
 * because several migrations are written by hand).
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const DRIZZLE_KIT = path.join(ROOT, 'node_modules/drizzle-kit/bin.cjs');

/** What one `drizzle-kit generate` on a copy of the tree wrote into its migrations/, and said. */
export interface GenerateResult {
  written: string[];
  output: string;
}

/** A change to one module of the copy's src/db/schema/ (e.g. 'bookings.ts'), made before generating. */
export interface SchemaEdit {
  file: string;
  change: (source: string) => string;
}

/**
 * Runs `drizzle-kit generate` in a temporary copy of what it reads (its config, the schema, the
 * migrations and their snapshots), never in the repository. `edit` changes the copy's schema
 * first, to show that a drift is caught.
 */
export async function generateInCopy(edit?: SchemaEdit): Promise<GenerateResult> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-drift-'));
  try {
    for (const f of ['drizzle.config.ts', 'package.json', 'tsconfig.json', 'src/db/schema', 'migrations']) {
      cpSync(path.join(ROOT, f), path.join(dir, f), { recursive: true });
    }
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
    if (edit) {
      const file = path.join(dir, 'src/db/schema', edit.file);
      const before = readFileSync(file, 'utf8');
      const after = edit.change(before);
      if (after === before) throw new Error('generateInCopy: the edit changed nothing');
      writeFileSync(file, after);
    }
    const list = () => readdirSync(path.join(dir, 'migrations'), { recursive: true, encoding: 'utf8' });
    const before = new Set(list());
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [DRIZZLE_KIT, 'generate'], {
      cwd: dir,
      env: { ...process.env, NO_COLOR: '1' },
    });
    return { written: list().filter((f) => !before.has(f)), output: stdout + stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Indexes made by hand-written SQL that the schema cannot declare, each with where it comes from.
 * Anything else in the database that the schema does not declare is a drift.
 */
const HAND_WRITTEN_INDEXES: Record<string, string> = {
  bookings_no_overlap: 'the EXCLUDE constraint (migrations/0001_booking_exclusion.sql)',
};

/**
 * Keys a table's partitions may have that the schema does not declare, each with why. The outbox's
 * days that hold rows of the release before the derived public ids keep their unique index on
 * public_id (src/outbox/migrations/0003_public_id_from_the_row.sql).
 */
const OPTIONAL_KEYS: Record<string, string> = { outbox: 'unique (public_id)' };

/** drizzle's type names where PostgreSQL prints another (format_type). */
function pgTypeOf(sqlType: string): string {
  return sqlType
    .replace(/^bigserial$/, 'bigint')
    .replace(/^serial$/, 'integer')
    .replace(/^smallserial$/, 'smallint')
    .replace(/^char\(/, 'character(')
    .replace(/^varchar\(/, 'character varying(')
    .replace(/^timestamp$/, 'timestamp without time zone');
}

const dialect = new PgDialect();

/** The SQL drizzle-kit writes for an index's column (its operator class, order and nulls) or expression. */
function indexPart(part: Partial<SQL | IndexedColumn>): string {
  if (is(part, SQL)) return dialect.sqlToQuery(part, 'indexes').sql;
  const { name, indexConfig: c } = part as IndexedColumn;
  // drizzle marks every column asc, nulls last; only what differs from PostgreSQL's default is written.
  const desc = c.order === 'desc';
  const nulls = desc ? c.nulls === 'last' && ' nulls last' : c.nulls === 'first' && ' nulls first';
  return `"${name}"${c.opClass ? ` ${c.opClass}` : ''}${desc ? ' desc' : ''}${nulls || ''}`;
}

/**
 * Every difference between the database `q` is connected to and the declared tables (src/db/schema.ts
 * and the outbox's src/outbox/schema.ts), one line each:
 * tables, columns (name, type, NOT NULL), indexes (each declared index made again on the table in
 * a savepoint and its definition as PostgreSQL prints it compared, so predicates and expressions
 * are compared in PostgreSQL's own words), primary keys and unique constraints. An empty list is
 * no drift. A partitioned table (the outbox) holds its primary key and unique constraints on each
 * partition (PostgreSQL allows none on the parent without the partition key): they are checked
 * there. Defaults, foreign keys and checks are not compared. Run it inside a transaction: the
 * indexes made to compare are each made and rolled back in a savepoint.
 */
export async function schemaDrift(q: pg.ClientBase): Promise<string[]> {
  const drift: string[] = [];
  const declared = (Object.values(schema) as unknown[]).filter((v): v is PgTable => is(v, PgTable)).map((t) => getTableConfig(t));
  const { rows: tables } = await q.query<{ name: string; kind: string }>(`
    select c.relname as name, c.relkind::text as kind
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition`);
  const kinds = new Map(tables.map((t) => [t.name, t.kind]));
  for (const t of tables) if (!declared.some((d) => d.name === t.name)) drift.push(`table ${t.name}: in the database, not in the schema`);

  for (const t of declared) {
    const kind = kinds.get(t.name);
    if (!kind) {
      drift.push(`table ${t.name}: in the schema, not in the database`);
      continue;
    }
    drift.push(...(await columnDrift(q, t)), ...(await indexDrift(q, t)), ...(await keyDrift(q, t, kind === 'p')));
  }
  return drift;
}

type TableConfig = ReturnType<typeof getTableConfig>;

async function columnDrift(q: pg.ClientBase, t: TableConfig): Promise<string[]> {
  const { rows } = await q.query<{ name: string; type: string; not_null: boolean }>(
    `select attname as name, format_type(atttypid, atttypmod) as type, attnotnull as not_null
       from pg_attribute where attrelid = $1::regclass and attnum > 0 and not attisdropped`,
    [t.name],
  );
  const drift: string[] = [];
  for (const c of t.columns) {
    const actual = rows.find((r) => r.name === c.name);
    const want = `${pgTypeOf(c.getSQLType())}${c.notNull ? ' not null' : ''}`;
    if (!actual) drift.push(`column ${t.name}.${c.name}: in the schema (${want}), not in the database`);
    else if (`${actual.type}${actual.not_null ? ' not null' : ''}` !== want) {
      drift.push(`column ${t.name}.${c.name}: ${want} in the schema, ${actual.type}${actual.not_null ? ' not null' : ''} in the database`);
    }
  }
  for (const r of rows)
    if (!t.columns.some((c) => c.name === r.name)) drift.push(`column ${t.name}.${r.name}: in the database, not in the schema`);
  return drift;
}

async function indexDrift(q: pg.ClientBase, t: TableConfig): Promise<string[]> {
  const { rows: actual } = await q.query<{ name: string; def: string; constraint_type: string | null }>(
    `select i.relname as name, pg_get_indexdef(i.oid) as def,
            (select contype::text from pg_constraint where conindid = i.oid and conrelid = x.indrelid and contype in ('p', 'u', 'x')) as constraint_type
       from pg_index x join pg_class i on i.oid = x.indexrelid
      where x.indrelid = $1::regclass`,
    [t.name],
  );
  const drift: string[] = [];
  for (const [n, idx] of t.indexes.entries()) {
    const { name, columns, unique, where, method, with: options } = idx.config;
    const probe = `drift_probe_${n}`;
    const storage = Object.entries(options ?? {}).map(([k, v]) => `${k} = ${String(v)}`);
    await q.query('savepoint probe');
    await q.query(
      `create ${unique ? 'unique ' : ''}index ${probe} on "${t.name}" using ${method} (${columns.map(indexPart).join(', ')})` +
        (storage.length ? ` with (${storage.join(', ')})` : '') +
        (where ? ` where ${dialect.sqlToQuery(where, 'indexes').sql}` : ''),
    );
    const { rows } = await q.query<{ def: string }>(`select pg_get_indexdef($1::regclass) as def`, [probe]);
    await q.query('rollback to savepoint probe');
    const want = rows[0]!.def.replace(probe, name!);
    const found = actual.find((a) => a.name === name);
    if (!found) drift.push(`index ${name}: in the schema, not in the database: ${want}`);
    else if (found.def !== want) drift.push(`index ${name}: the schema says ${want}; the database has ${found.def}`);
  }
  for (const a of actual) {
    if (a.constraint_type === 'p' || a.constraint_type === 'u') continue; // compared by keyDrift
    if (t.indexes.some((i) => i.config.name === a.name) || HAND_WRITTEN_INDEXES[a.name]) continue;
    drift.push(`index ${a.name}: in the database, not in the schema: ${a.def}`);
  }
  return drift;
}

/** Primary key and unique constraints, as sets of columns: on the table, or on each partition. */
async function keyDrift(q: pg.ClientBase, t: TableConfig, partitioned: boolean): Promise<string[]> {
  const want = new Set<string>();
  const pk = [...t.columns.filter((c) => c.primary).map((c) => c.name), ...t.primaryKeys.flatMap((k) => k.columns.map((c) => c.name))];
  if (pk.length) want.add(`primary key (${pk.join(', ')})`);
  for (const c of t.columns) if (c.isUnique) want.add(`unique (${c.name})`);
  for (const u of t.uniqueConstraints) want.add(`unique (${u.columns.map((c) => c.name).join(', ')})`);
  const { rows: holders } = partitioned
    ? await q.query<{ name: string }>(`select inhrelid::regclass::text as name from pg_inherits where inhparent = $1::regclass`, [t.name])
    : { rows: [{ name: t.name }] };
  const drift: string[] = [];
  for (const h of holders) {
    const { rows } = await q.query<{ key: string }>(
      `select case contype when 'p' then 'primary key' else 'unique' end
              || ' (' || (select string_agg(attname, ', ' order by k.ord) from unnest(conkey) with ordinality k(attnum, ord)
                          join pg_attribute a on a.attrelid = conrelid and a.attnum = k.attnum) || ')' as key
         from pg_constraint where conrelid = $1::regclass and contype in ('p', 'u')`,
      [h.name],
    );
    const have = new Set(rows.map((r) => r.key));
    for (const k of want) if (!have.has(k)) drift.push(`${h.name}: ${k} in the schema, not in the database`);
    for (const k of have) if (!want.has(k) && OPTIONAL_KEYS[t.name] !== k) drift.push(`${h.name}: ${k} in the database, not in the schema`);
  }
  return drift;
}
