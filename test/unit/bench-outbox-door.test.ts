import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/*
 * The bench reaches our outbox through one file, scripts/bench/lib/outbox.ts: its SQL on the
 * outbox table and its imports of src/outbox's inner modules (the statements it measures). When
 * src/outbox changes, that file is the one to follow. The pgbench booking transaction
 * (api-pgbench.ts) is the service's transaction as one script, and stays whole.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const bench = path.join(root, 'scripts/bench');
const DOOR = 'lib/outbox.ts';
const ALLOWED_SQL = new Set([DOOR, 'api-pgbench.ts']);

const files = (readdirSync(bench, { recursive: true }) as string[])
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.split(path.sep).join('/'));
const outboxSql = /\b(insert\s+into|update|delete\s+from|from|truncate|vacuum(\s+analyze)?|analyze)\s+outbox\b/i;
const innerImport = /from\s+'[./]*\/src\/outbox\/(?!index\.ts')[^']+'/;

describe('the bench and the outbox', () => {
  it('writes SQL on the outbox table only in lib/outbox.ts', () => {
    expect(files).toContain(DOOR);
    const offenders = files.filter((f) => !ALLOWED_SQL.has(f) && outboxSql.test(readFileSync(path.join(bench, f), 'utf8')));
    expect(offenders).toEqual([]);
  });

  it("imports src/outbox's inner modules only in lib/outbox.ts", () => {
    const offenders = files.filter((f) => f !== DOOR && innerImport.test(readFileSync(path.join(bench, f), 'utf8')));
    expect(offenders).toEqual([]);
    expect(innerImport.test(readFileSync(path.join(bench, DOOR), 'utf8'))).toBe(true);
  });
});
