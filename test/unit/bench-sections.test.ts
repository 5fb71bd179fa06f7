import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SECTION_NAMES, SECTIONS } from '../../scripts/bench/sections/index.ts';

/*
 * The bench's sections are listed once (scripts/bench/sections/index.ts); what else names them
 * follows that list: the list a reader of docs/performance.md is given for `--only`, and the
 * report, which orders every section's parts by their places.
 */

const root = path.resolve(import.meta.dirname, '../..');

/** The sections docs/performance.md lists beside `--only`, as its "# sections: a, b, …" comment gives them. */
function documentedSections(): string[] {
  const doc = readFileSync(path.join(root, 'docs/performance.md'), 'utf8');
  const lists = [...doc.matchAll(/# sections: (.+)$/gm)].map((m) => m[1]!.split(',').map((s) => s.trim()));
  expect(lists, 'docs/performance.md lists the sections once').toHaveLength(1);
  return lists[0]!;
}

describe('the sections of the bench', () => {
  it('are listed in docs/performance.md as they run', () => {
    expect(documentedSections()).toEqual(SECTION_NAMES);
  });

  it('each have a name of their own, which is what --only accepts', () => {
    expect(new Set(SECTION_NAMES).size).toBe(SECTIONS.length);
    expect(SECTION_NAMES).toEqual(SECTIONS.map((s) => s.name));
    for (const name of SECTION_NAMES) expect(name, 'a name --only can take').toMatch(/^[a-z][a-z-]*$/);
  });

  it('each write a part of the report, every part at a place of its own', () => {
    for (const s of SECTIONS) expect(s.markdown.length, s.name).toBeGreaterThan(0);
    const places = SECTIONS.flatMap((s) => s.markdown.map((p) => p.place));
    expect(new Set(places).size, 'two parts at one place would be ordered by accident').toBe(places.length);
  });
});
