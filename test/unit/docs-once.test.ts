import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/*
 * How the outbox worker behaves is told on one page, docs/worker.md (architecture.md walks the same
 * path file by file). Every other page links to the section instead of telling it again, so a
 * change of behaviour is corrected in one place and no page is left saying what used to be true.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (rel: string) => readFileSync(path.join(root, rel), 'utf8');

const OWNER = 'docs/worker.md';
const MAY_TELL = new Set([OWNER, 'docs/architecture.md']);

/** The pages people read; decision records and the changelog are records of their time, not checked. */
const docsPages = readdirSync(path.join(root, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .map((f) => `docs/${f}`);
const pages = ['README.md', 'CONTRIBUTING.md', ...docsPages];

/**
 * Phrases that tell a fact of the worker's behaviour, each in the words it is usually told in.
 * Matched on a page's text with its line breaks folded, so a sentence wrapped anywhere still
 * matches.
 */
const TOLD_BY_THE_WORKER_PAGE: Record<string, RegExp> = {
  'the backoff formula': /\b2 × 2\^|\b2 s,? doubling\b|\b2, 4, 8, 16\b/,
  'FOR UPDATE SKIP LOCKED as what lets workers share the outbox':
    /FOR UPDATE SKIP LOCKED\b[^.]*?\b(?:so|shares?|any number|without waiting)\b/i,
  "the heartbeat's quarter of a lease": /\bquarter of (?:a|the|its) lease\b|LEASE_SECONDS ?\/ ?4\b/i,
  'the hand-back rule': /\bhalf (?:of )?its lease\b|\bhand(?:s|ed|ing)? back\b/i,
  'an unknown topic is never dead-lettered': /\b(?:topic|handler)\b[^.]*\b(?:not|never) dead-lettered\b/i,
  'the graceful drain': /\bstops claiming\b/i,
  'per-key order': /\bolder (?:message|one) (?:of|with the same) (?:its )?`?key\b/i,
  'a replay resets the attempts': /\battempts (?:are )?reset\b/i,
};

const folded = (rel: string) => read(rel).replace(/\s+/g, ' ');

/** Where each phrase is told outside the pages that may tell it, as `page: fact: "words"`. */
function retellings(): string[] {
  const found: string[] = [];
  for (const page of pages.filter((p) => !MAY_TELL.has(p))) {
    const text = folded(page);
    for (const [fact, phrase] of Object.entries(TOLD_BY_THE_WORKER_PAGE)) {
      const m = phrase.exec(text);
      if (m) found.push(`${page}: ${fact}: "${m[0]}"`);
    }
  }
  return found;
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
const anchor = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');

/** The anchors of a page's headings, fenced code left out. */
function anchorsOf(rel: string): Set<string> {
  const out = new Set<string>();
  let fenced = false;
  for (const line of read(rel).split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const h = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (h) out.add(anchor(h[1] ?? ''));
  }
  return out;
}

describe("the worker's behaviour, told once (docs/worker.md)", () => {
  it('is not told again on another page: they link to its section', () => {
    expect(retellings()).toEqual([]);
  });

  it('is still told by docs/worker.md in the words each guard looks for', () => {
    const text = folded(OWNER);
    const lost = Object.entries(TOLD_BY_THE_WORKER_PAGE)
      .filter(([, phrase]) => !phrase.test(text))
      .map(([fact]) => fact);
    expect(lost).toEqual([]);
  });

  it('is linked to by sections docs/worker.md has', () => {
    const anchors = anchorsOf(OWNER);
    const linking = [...pages, ...readdirSync(path.join(root, 'docs/adr')).map((f) => `docs/adr/${f}`)];
    const broken: string[] = [];
    for (const page of linking) {
      const text = read(page);
      const links = [...text.matchAll(/worker\.md#([\w-]+)/g)].map((m) => m[1] ?? '');
      if (page === OWNER) links.push(...[...text.matchAll(/\]\(#([\w-]+)\)/g)].map((m) => m[1] ?? ''));
      for (const a of links) if (!anchors.has(a)) broken.push(`${page}: #${a}`);
    }
    expect(broken).toEqual([]);
  });
});
