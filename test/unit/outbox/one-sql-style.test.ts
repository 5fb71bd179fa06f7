import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { matchingCodeLines, repoRoot as root, sourceFiles } from '../../helpers/source-lines.ts';

/*
 * The outbox writes its SQL one way: named statements sent by run/execute on an Executor, a pg
 * pool or connection (src/outbox/executor.ts). drizzle is met in two files only: schema.ts, the
 * tables as drizzle declares them (the schema-drift check and the docs read it), and executor.ts,
 * which turns the application's drizzle database or transaction into the pool or connection
 * behind it. Anywhere else in src/outbox/, a drizzle import or a drizzle handle's
 * execute/transaction is SQL sent a second way, and types that depend on the application's schema.
 *
 * The functions that take the application's `Db` or `Tx` are the entry points (what
 * src/outbox/index.ts and testing.ts give callers): they convert once, the rest take an Executor.
 */

const OUTBOX = 'src/outbox';
const DRIZZLE_ALLOWED = new Set(['src/outbox/schema.ts', 'src/outbox/executor.ts']);

const DRIZZLE_USE = [
  // an import of drizzle-orm or one of its entry points, static or dynamic
  /\bfrom\s+['"]drizzle-orm(\/[^'"]*)?['"]/,
  /\bimport\s*\(\s*['"]drizzle-orm/,
  // a drizzle handle sending SQL: db.execute(…), tx.execute<T>(…), db.transaction(…)
  /\.(execute|transaction)\s*[<(]/,
];

/** The files whose functions take the application's drizzle `Db` or `Tx`, each converting once. */
const ENTRY_POINTS = new Set([
  'src/outbox/enqueue.ts',
  'src/outbox/stats.ts',
  'src/outbox/messages.ts',
  'src/outbox/requeue.ts',
  'src/outbox/purge.ts',
  'src/outbox/finished-page.ts',
  'src/outbox/last-finished.ts',
  'src/outbox/finished-payload-values.ts',
  'src/outbox/messages-by-id.ts',
  'src/outbox/claim-connection.ts',
  'src/outbox/planned-connection.ts',
  'src/outbox/runner/options.ts',
  'src/outbox/runner/housekeeping.ts',
  'src/outbox/testing.ts',
  'src/outbox/executor.ts',
  'src/outbox/wal-messages.ts',
]);

/** An import of the application's drizzle types, `Db` (src/db/client.ts) or `Tx` (src/db/transaction.ts). */
const DRIZZLE_HANDLE_IMPORT = /^import\b.*\b(Db|Tx)\b.*from\s+['"](\.\.\/)+db\/(client|transaction)\.ts['"]/;

const outboxFiles = sourceFiles(OUTBOX);
const text = (f: string) => readFileSync(path.join(root, f), 'utf8');
const drizzleLines = (source: string) => matchingCodeLines(source, DRIZZLE_USE);

describe('the outbox sends its SQL one way', () => {
  it("recognises drizzle where it is used, and not the outbox's own run/execute", () => {
    for (const line of [
      "import { sql } from 'drizzle-orm';",
      "import { pgTable } from 'drizzle-orm/pg-core';",
      "const { drizzle } = await import('drizzle-orm/node-postgres');",
      '  const { rows } = await db.execute<{ n: number }>(sql`select 1`);',
      '    await tx.execute(sql.raw(`alter table outbox attach partition x`));',
      '  const given = await db.transaction(async (tx) => {',
    ]) {
      expect(drizzleLines(line), line).toEqual([line]);
    }
    for (const line of [
      '  const res = await execute(q, DELETE_BATCH, [cutoff, day, batchSize]);',
      '  const rows = await run<{ id: string }>(pool, INSERT_MESSAGES, [ids]);',
      '  const given = await inTransaction(pool, async (tx) => {',
      ' * through db.execute, as drizzle did',
      "// drizzle's transaction(): begin, commit",
    ]) {
      expect(drizzleLines(line), line).toEqual([]);
    }
  });

  it('meets drizzle only in schema.ts and the adapter', () => {
    expect(outboxFiles).toEqual(expect.arrayContaining([...DRIZZLE_ALLOWED, 'src/outbox/enqueue.ts', 'src/outbox/runner/loop.ts']));
    const offenders = outboxFiles
      .filter((f) => !DRIZZLE_ALLOWED.has(f))
      .flatMap((f) => drizzleLines(text(f)).map((line) => `${f}: ${line.trim()}`));
    expect(offenders).toEqual([]);
  });

  it("takes the application's Db or Tx only at its entry points", () => {
    const importing = outboxFiles.filter((f) =>
      text(f)
        .split('\n')
        .some((line) => DRIZZLE_HANDLE_IMPORT.test(line)),
    );
    expect(importing.filter((f) => !ENTRY_POINTS.has(f))).toEqual([]);
    // and the list stays true: an entry point that no longer takes one is taken off it
    expect([...ENTRY_POINTS].filter((f) => !importing.includes(f))).toEqual([]);
  });
});
