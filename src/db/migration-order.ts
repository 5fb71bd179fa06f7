import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';

/*
 * drizzle's migrator decides what to apply by time, not by name: it reads the newest row of
 * drizzle.__drizzle_migrations and applies every journal entry whose "when" is greater than that
 * row's created_at. An entry stamped lower than one already applied is skipped for ever, and
 * `migrate` still says it succeeded. drizzle-kit stamps a new entry with the clock, while our
 * journal's stamps are ahead of it, so a generated migration lands below the last one. Both ways
 * of going wrong are refused here, before drizzle runs (ADR 0042).
 */

export interface JournalEntry {
  idx: number;
  when: number;
  tag: string;
}

interface Journal {
  entries: JournalEntry[];
}

export const journalPath = (migrationsDir: string) => path.join(migrationsDir, 'meta', '_journal.json');

export function readJournal(migrationsDir: string): Journal {
  return JSON.parse(readFileSync(journalPath(migrationsDir), 'utf8')) as Journal;
}

/** A journal (or a database) whose order drizzle would get wrong; the message is one line. */
export class MigrationOrderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MigrationOrderError';
  }
}

/** What is wrong with the journal's own order: entries out of idx order, or stamps that do not increase with idx. */
export function journalOrderProblems(entries: readonly JournalEntry[]): string[] {
  const problems: string[] = [];
  entries.forEach((e, i) => {
    if (e.idx !== i) problems.push(`${e.tag} is entry ${i} of the journal but has idx ${e.idx}`);
    if (!Number.isSafeInteger(e.when)) problems.push(`${e.tag} has no valid "when" stamp (${String(e.when)})`);
    const prev = entries[i - 1];
    if (prev && !(e.when > prev.when)) {
      problems.push(`${e.tag} is stamped ${e.when}, not above ${prev.tag}'s ${prev.when}`);
    }
  });
  return problems;
}

/**
 * The entries this database has not applied (no row carries their stamp) yet stamped at or below
 * the newest applied one: drizzle would skip them without a word.
 */
export function skippedEntries(entries: readonly JournalEntry[], appliedStamps: readonly number[]): JournalEntry[] {
  if (!appliedStamps.length) return [];
  const applied = new Set(appliedStamps);
  const newest = Math.max(...appliedStamps);
  return entries.filter((e) => !applied.has(e.when) && e.when <= newest);
}

/** The stamps of the migrations this database has applied, newest last; none before the first migration. */
async function appliedStamps(client: pg.ClientBase): Promise<number[]> {
  const { rows } = await client.query<{ exists: boolean }>(`select to_regclass('drizzle.__drizzle_migrations') is not null as exists`);
  if (!rows[0]?.exists) return [];
  const applied = await client.query<{ created_at: string }>('select created_at from drizzle.__drizzle_migrations order by created_at');
  return applied.rows.map((r) => Number(r.created_at));
}

const HOW_TO_FIX = 'add migrations with `npm run migration:new -- <name>`, which stamps them in order (docs/operating.md)';

/** Throws a MigrationOrderError when drizzle would apply the journal out of order or skip part of it. */
export async function checkMigrationOrder(client: pg.ClientBase, migrationsDir: string): Promise<void> {
  const { entries } = readJournal(migrationsDir);
  const problems = journalOrderProblems(entries);
  if (problems.length) {
    throw new MigrationOrderError(
      `refusing to migrate: migrations/meta/_journal.json's "when" stamps must increase with idx (drizzle applies by stamp): ` +
        `${problems.join('; ')}. Give each a stamp above the one before; ${HOW_TO_FIX}`,
    );
  }
  const stamps = await appliedStamps(client);
  const skipped = skippedEntries(entries, stamps);
  if (skipped.length) {
    const newest = Math.max(...stamps);
    throw new MigrationOrderError(
      `refusing to migrate: ${skipped.map((e) => `${e.tag} (stamped ${e.when})`).join(', ')} not applied, yet stamped ` +
        `at or below ${newest}, the newest migration this database has applied: drizzle would skip ${skipped.length > 1 ? 'them' : 'it'}. ` +
        `Restamp ${skipped.length > 1 ? 'them' : 'it'} above ${newest} in migrations/meta/_journal.json (renumbering after the last entry); ${HOW_TO_FIX}`,
    );
  }
}

/**
 * After drizzle-kit has appended an entry: a stamp not above the entry before it becomes the one
 * before it plus 1 ms (drizzle-kit stamps with the clock; our journal's stamps may be ahead of it).
 * Returns the entry restamped, or undefined when its stamp was in order already.
 */
export function restampLast(journal: Journal): { entry: JournalEntry; was: number } | undefined {
  const [prev, last] = journal.entries.slice(-2);
  if (!prev || !last || last.when > prev.when) return undefined;
  const was = last.when;
  last.when = prev.when + 1;
  return { entry: last, was };
}

export function writeJournal(migrationsDir: string, journal: Journal): void {
  // As drizzle-kit writes it: two-space JSON, no final newline.
  writeFileSync(journalPath(migrationsDir), JSON.stringify(journal, null, 2));
}
