import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { getTableConfig } from 'drizzle-orm/pg-core';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { outbox } from '../../src/outbox/testing.ts';

/*
 * Docs that cannot drift from the tree: a path a page or a comment names exists, the outbox
 * table's page lists every column and index the schema has, the two paths are drawn on one page
 * only, and the ADR index lists every record.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (rel: string) => readFileSync(path.join(root, rel), 'utf8');

function filesUnder(dir: string, ext: string): string[] {
  return readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(ext))
    .map((f) => path.join(dir, f).split(path.sep).join('/'));
}

/*
 * A path of the tree as prose names it: under one of these folders, from the repository's root or
 * (a Markdown link) through `../`. Not one inside another path (`dist/src/…`, a URL).
 */
const PATH = /(?<![\w./-])(?:\.\.\/)*((?:src|scripts|test|migrations|docs)\/[\w./*-]*[\w*/])/g;

/*
 * Names that are not the tree's on purpose, each for its reason. A glob here must still match a
 * file, and an entry nothing cites any more fails: the list cannot outlive its reasons.
 */
const NOT_IN_THE_TREE: Record<string, string> = {
  'migrations/NNNN_what_it_does.sql': "operating.md: the name a new migration's file is given",
  'migrations/meta/NNNN_snapshot.json': "operating.md: the name of a new migration's snapshot",
  'src/worker/handlers/sms-guest.ts': 'worker.md: a hypothetical handler, the example of writing one',
  'src/plans.ts': "ADR 0033: pg-boss's file, in the survey of how peers claim by priority",
  'test/unit/scripts-outbox-door.test.ts': 'ADR 0046: the test it replaced, a record of what was',
  'src/db/schema/outbox.ts': "ADRs 0046 and 0050: where the outbox's tables were declared before it owned them",
  'src/outbox/migrations/NNNN_what_it_does.sql': "operating.md: the name a new outbox migration's file is given",
  'src/outbox/migrations/NNNN_name.sql': "the outbox migrations' naming rule (src/outbox/migrate.ts, ADR 0050)",
};
const PATTERNS: Record<string, string> = {
  'docs/img/portal-*.png': "CONTRIBUTING.md: the portal's screenshots, one a page",
  'src/webhooks/portal-links.*.ts': "a comment naming the portal links' modules together",
};

const globRe = (glob: string) => new RegExp(`^${glob.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
const globMatches = (glob: string) => {
  const dir = glob.slice(0, glob.lastIndexOf('/', glob.indexOf('*')));
  return filesUnder(dir, '').some((f) => globRe(glob).test(f));
};

/** A migration named by its number (`migrations/0011`) exists when a file has that number. */
const migrationNumbered = (p: string) =>
  /^migrations\/\d{4}$/.test(p) && readdirSync(path.join(root, 'migrations')).some((f) => f.startsWith(`${p.slice(11)}_`));

/** The comments of a TypeScript file, with the line each starts on (the parser's, not a regex's). */
function comments(file: string): { line: number; text: string }[] {
  const text = read(file);
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const ranges = new Map<number, ts.CommentRange>();
  const visit = (node: ts.Node) => {
    for (const r of [
      ...(ts.getLeadingCommentRanges(text, node.getFullStart()) ?? []),
      ...(ts.getTrailingCommentRanges(text, node.getEnd()) ?? []),
    ]) {
      ranges.set(r.pos, r);
    }
    node.forEachChild(visit);
  };
  visit(source);
  for (const r of ts.getLeadingCommentRanges(text, source.endOfFileToken.getFullStart()) ?? []) ranges.set(r.pos, r);
  return [...ranges.values()].map((r) => ({
    line: source.getLineAndCharacterOfPosition(r.pos).line + 1,
    text: text.slice(r.pos, r.end),
  }));
}

/** Every tree path cited, as `path → where`. */
function citations(): Map<string, string[]> {
  const cited = new Map<string, string[]>();
  const cite = (p: string, where: string) => cited.set(p, [...(cited.get(p) ?? []), where]);
  const pages = [...filesUnder('docs', '.md'), 'README.md', 'CONTRIBUTING.md'];
  for (const page of pages) {
    read(page)
      .split('\n')
      .forEach((line, i) => {
        for (const m of line.matchAll(PATH)) cite(m[1] ?? '', `${page}:${i + 1}`);
      });
  }
  for (const file of [...filesUnder('src', '.ts'), ...filesUnder('scripts', '.ts')]) {
    for (const c of comments(file)) {
      c.text.split('\n').forEach((line, i) => {
        for (const m of line.matchAll(PATH)) cite(m[1] ?? '', `${file}:${c.line + i}`);
      });
    }
  }
  return cited;
}

describe('paths named in the docs and in comments', () => {
  const cited = citations();

  it('exist in the tree', () => {
    const missing = [...cited]
      .filter(([p]) => !existsSync(path.join(root, p)) && !migrationNumbered(p) && !(p in NOT_IN_THE_TREE) && !(p in PATTERNS))
      .map(([p, where]) => `${p} (${where.join(', ')})`);
    expect(missing).toEqual([]);
  });

  it('are allowed to be absent only for a reason that still holds', () => {
    const stale = Object.keys(NOT_IN_THE_TREE).filter((p) => !cited.has(p) || existsSync(path.join(root, p)));
    const emptyPatterns = Object.keys(PATTERNS).filter((p) => !cited.has(p) || !globMatches(p));
    expect({ stale, emptyPatterns }).toEqual({ stale: [], emptyPatterns: [] });
  });
});

describe("architecture.md's outbox table", () => {
  const page = read('docs/architecture.md');
  const section = page.slice(page.indexOf('## The outbox table'), page.indexOf('\n## ', page.indexOf('## The outbox table') + 1));
  const config = getTableConfig(outbox);

  it('lists every column of the schema', () => {
    const listed = new Set(
      section
        .split('\n')
        .filter((l) => l.startsWith('| `'))
        .flatMap((l) => [...(l.split('|')[1] ?? '').matchAll(/`(\w+)`/g)].map((m) => m[1])),
    );
    expect(config.columns.map((c) => c.name).filter((c) => !listed.has(c))).toEqual([]);
  });

  it('names every index of the schema', () => {
    const names = config.indexes.map((i) => i.config.name ?? '(unnamed)');
    expect(names.filter((n) => !section.includes(`\`${n}\``))).toEqual([]);
  });
});

describe('the two paths', () => {
  // Drawn once, in architecture.md, which owns the file map; the README and worker.md link to it.
  const pages = ['README.md', 'CONTRIBUTING.md', ...filesUnder('docs', '.md')];
  const DRAWING = /^\s*(request|worker)\s+→/m;

  it('are drawn in docs/architecture.md and nowhere else', () => {
    expect(pages.filter((p) => DRAWING.test(read(p)))).toEqual(['docs/architecture.md']);
  });
});

describe('the ADR index (docs/adr/README.md)', () => {
  const index = read('docs/adr/README.md');
  const records = readdirSync(path.join(root, 'docs/adr')).filter((f) => /^\d{4}-.*\.md$/.test(f));

  it('links every record', () => {
    expect(records.filter((f) => !index.includes(`](${f})`))).toEqual([]);
  });

  it('accounts for every number up to the last: a record, or "number not used"', () => {
    const last = Math.max(...records.map((f) => Number(f.slice(0, 4))));
    const unaccounted: string[] = [];
    for (let n = 1; n <= last; n++) {
      const num = String(n).padStart(4, '0');
      const hasRecord = records.some((f) => f.startsWith(`${num}-`));
      if (!hasRecord && !new RegExp(`^\\| ${num} \\| Number not used`, 'm').test(index)) unaccounted.push(num);
    }
    expect(unaccounted).toEqual([]);
  });
});
