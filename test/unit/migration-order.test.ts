import { describe, expect, it } from 'vitest';
import { journalOrderProblems, restampLast, skippedEntries } from '../../src/db/migration-order.ts';

const entry = (idx: number, when: number) => ({ idx, when, tag: `${String(idx).padStart(4, '0')}_m${idx}` });

describe('migration order', () => {
  it('restamps a new entry drizzle-kit stamped at or below the one before it, and leaves one in order alone', () => {
    const journal = { entries: [entry(0, 1_000), entry(1, 5_000), entry(2, 2_000)] };
    expect(restampLast(journal)).toEqual({ entry: entry(2, 5_001), was: 2_000 });
    expect(journalOrderProblems(journal.entries)).toEqual([]);
    expect(restampLast({ entries: [entry(0, 1_000), entry(1, 1_001)] })).toBeUndefined();
  });

  it('names entries whose stamp is not above the one before, or whose idx is not their place', () => {
    expect(journalOrderProblems([entry(0, 1_000), entry(1, 1_000), { ...entry(3, 2_000) }])).toEqual([
      "0001_m1 is stamped 1000, not above 0000_m0's 1000",
      '0003_m3 is entry 2 of the journal but has idx 3',
    ]);
  });

  it('finds the entries not applied but stamped at or below the newest applied one', () => {
    const entries = [entry(0, 1_000), entry(1, 2_000), entry(2, 3_000)];
    expect(skippedEntries(entries, [])).toEqual([]);
    expect(skippedEntries(entries, [1_000, 2_000])).toEqual([]);
    expect(skippedEntries(entries, [1_000, 3_000])).toEqual([entry(1, 2_000)]);
  });
});
