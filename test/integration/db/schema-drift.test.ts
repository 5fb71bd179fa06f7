import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from '../../../src/db/migrate.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { generateInCopy, schemaDrift } from '../../helpers/schema-drift.ts';

/*
 * The schema (src/db/schema/, and the outbox's src/outbox/schema.ts), the migrations' saved snapshots and the migrations' SQL say the same thing
 * (test/helpers/schema-drift.ts). When they drift, `npx drizzle-kit generate` writes a migration
 * that undoes or repeats work, or a database ends up other than the code expects. Each check is
 * also shown to catch a deliberate drift, so that a check that cannot fail is noticed here.
 */

const tdb = useTestDatabase('drift');

describe('the journal', () => {
  it('lists every migration once, in order, each stamped later than the one before', () => {
    const journal = JSON.parse(readFileSync(path.join(MIGRATIONS_DIR, 'meta/_journal.json'), 'utf8')) as {
      entries: { idx: number; when: number; tag: string }[];
    };
    const files = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql'));
    expect(journal.entries.map((e) => `${e.tag}.sql`)).toEqual(files.sort());
    expect(journal.entries.map((e) => e.idx)).toEqual(journal.entries.map((_, i) => i));
    // drizzle's migrator applies a migration only if its `when` is later than that of the last one
    // the database applied: one stamped earlier (drizzle-kit stamps the clock's time) would be
    // skipped on every database that already holds the one before, and run on new ones.
    for (let i = 1; i < journal.entries.length; i++) {
      expect(journal.entries[i]!.when, journal.entries[i]!.tag).toBeGreaterThan(journal.entries[i - 1]!.when);
    }
  });
});

describe('drizzle-kit generate', () => {
  it('finds nothing to write: the saved snapshots match the schema', async () => {
    const { written, output } = await generateInCopy();
    expect(written, output).toEqual([]);
    expect(output).toContain('No schema changes');
  });

  it('writes a migration for a column added to the schema (the check can fail)', async () => {
    const { written } = await generateInCopy({
      file: 'bookings.ts',
      change: (s) =>
        s.replace("requestHash: text('request_hash').notNull(),", "requestHash: text('request_hash').notNull(), drift: text('drift'),"),
    });
    expect(written.filter((f) => /^\d{4}_.*\.sql$/.test(f))).toHaveLength(1);
  });
});

describe('a migrated database', () => {
  it('holds the tables, columns, indexes and keys the schema declares, and no others', async () => {
    const client = await tdb.pool.connect();
    try {
      await client.query('begin');
      expect(await schemaDrift(client)).toEqual([]);
    } finally {
      await client.query('rollback');
      client.release();
    }
  });

  it('differs when an index, a column or a predicate drifts (the check can fail)', async () => {
    const client = await tdb.pool.connect();
    try {
      // Every drift is made in a transaction that is rolled back: the database stays as migrated.
      await client.query('begin');
      await client.query('drop index outbox_dead_idx');
      await client.query('alter table sessions add column drifted text');
      await client.query('alter table users alter column name drop not null');
      await client.query('drop index bookings_guest_idx');
      await client.query('create index bookings_guest_idx on bookings (guest_id)');
      await client.query('drop index outbox_key_idx');
      await client.query('create index outbox_key_idx on outbox (key, id) where key is not null');
      await client.query('alter table webhook_events add constraint drifted_unique unique (id, created_at)');
      const found = await schemaDrift(client);
      expect(found).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/^index outbox_dead_idx: in the schema, not in the database/),
          'column sessions.drifted: in the database, not in the schema',
          'column users.name: text not null in the schema, text in the database',
          expect.stringMatching(/^index bookings_guest_idx: the schema says .*\(guest_id, id\).*; the database has .*\(guest_id\)$/),
          expect.stringMatching(/^index outbox_key_idx: the schema says .*status <> ALL.*; the database has .*WHERE \(key IS NOT NULL\)$/),
          'webhook_events: unique (id, created_at) in the database, not in the schema',
        ]),
      );
      expect(found).toHaveLength(6);
    } finally {
      await client.query('rollback');
      client.release();
    }
  });
});
