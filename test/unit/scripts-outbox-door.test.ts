import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/*
 * scripts/ reaches the outbox through src/outbox/index.ts, like the rest of the code; the chaos run
 * reads it with src/outbox/as-written.ts's queries. The one exception is the bench's door,
 * scripts/bench/lib/outbox.ts: the bench measures statements behind the index (the claim, the
 * DONE write, a partition's drop) and writes rows the product never writes (bench topics, a
 * backlog in one statement), and keeps both in that one file, the one to follow when src/outbox
 * changes. The pgbench booking transaction (bench/api-pgbench.ts) is the service's transaction as
 * one script, and stays whole.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const scripts = path.join(root, 'scripts');
const DOOR = 'bench/lib/outbox.ts';
const ALLOWED_SQL = new Set([DOOR, 'bench/api-pgbench.ts']);

const files = (readdirSync(scripts, { recursive: true }) as string[])
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.split(path.sep).join('/'));
const outboxSql = /\b(insert\s+into|update|delete\s+from|from|truncate|vacuum(\s+analyze)?|analyze)\s+outbox\b/i;
const innerImport = /from\s+'[./]*\/src\/outbox\/(?!index\.ts')[^']+'/;

describe('scripts and the outbox', () => {
  it("write SQL on the outbox table only in the bench's door", () => {
    expect(files).toContain(DOOR);
    const offenders = files.filter((f) => !ALLOWED_SQL.has(f) && outboxSql.test(readFileSync(path.join(scripts, f), 'utf8')));
    expect(offenders).toEqual([]);
  });

  it("import src/outbox's inner modules only in the bench's door", () => {
    const offenders = files.filter((f) => f !== DOOR && innerImport.test(readFileSync(path.join(scripts, f), 'utf8')));
    expect(offenders).toEqual([]);
    expect(innerImport.test(readFileSync(path.join(scripts, DOOR), 'utf8'))).toBe(true);
  });
});
