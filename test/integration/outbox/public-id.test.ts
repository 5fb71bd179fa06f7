import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { findMessage, idOf } from '../../../src/outbox/index.ts';
import { publicIdParts } from '../../../src/outbox/testing.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { outboxPlansOf } from '../../helpers/statement-plans.ts';

/*
 * Public ids derived from the row (ADR 0051): a UUIDv7 of created_at carrying the id, found by a
 * probe of its day's primary key. The rows of the release before keep random ids, found through
 * their day's unique index; nothing a client sends makes a lookup scan a day.
 */

const tdb = useTestDatabase('publicids');

/** The day partition that holds `now`. */
const todayPart = async () =>
  (await tdb.pool.query<{ part: string }>(`select tableoid::regclass::text as part from outbox where id = (select max(id) from outbox)`))
    .rows[0]!.part;

describe('a public id derived from the row', () => {
  it('is the row created_at and id as a UUIDv7, and finds its message', async () => {
    const [m] = await insertMessages(tdb.db, [{ topic: 'thing.happened', key: 'k1' }]);
    const { rows } = await tdb.pool.query<{ created_ms: number; derived: string }>(
      `select (extract(epoch from created_at) * 1000)::float8 as created_ms, outbox_public_id(created_at, id)::text as derived from outbox where id = $1`,
      [m!.id],
    );
    expect(m!.public_id).toBe(rows[0]!.derived);
    expect(m!.public_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7000-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const parts = publicIdParts(m!.public_id)!;
    expect(parts.id).toBe(String(m!.id));
    expect(Date.parse(parts.createdFrom)).toBe(Math.floor(rows[0]!.created_ms));
    expect(await findMessage(tdb.db, m!.public_id)).toMatchObject({ id: m!.id, publicId: m!.public_id, topic: 'thing.happened' });
    expect(await idOf(tdb.db, m!.public_id)).toBe(m!.id);
  });

  it('carries the created_at a writer gives (a lane message carries its original’s), in that day', async () => {
    const { rows } = await tdb.pool.query<{ public_id: string; id: string }>(
      `insert into outbox (topic, payload, created_at) values ('thing.happened', '{}', now() - interval '2 hours') returning public_id, id`,
    );
    expect(await idOf(tdb.db, rows[0]!.public_id)).toBe(Number(rows[0]!.id));
  });

  it('of the release before (random) is found in the days that kept their unique index', async () => {
    await insertMessages(tdb.db, [{ topic: 'thing.happened' }]);
    const part = await todayPart();
    await tdb.pool.query(`alter table ${part} add constraint ${part}_public_id_key unique (public_id)`);
    try {
      const { rows } = await tdb.pool.query<{ public_id: string; id: string }>(
        `insert into outbox (public_id, topic, payload) values (outbox_uuid_v7(), 'thing.happened', '{}') returning public_id, id`,
      );
      expect(publicIdParts(rows[0]!.public_id)).toBeNull();
      expect(await idOf(tdb.db, rows[0]!.public_id)).toBe(Number(rows[0]!.id));
      // And the lookups, found or not, of any UUID, probe indexes only.
      const lookups = [rows[0]!.public_id, randomUUID(), '01890a5d-ac96-7000-8000-00000000ffff', 'ffffffff-ffff-7000-bfff-ffffffffffff'];
      const plans = await outboxPlansOf(tdb.url, async ({ db }) => {
        for (const id of lookups) await findMessage(db, id);
      });
      expect(plans.join('\n')).toMatch(/_public_id_key/);
      for (const p of plans) expect(p).not.toMatch(/Seq Scan/);
      for (const id of lookups.slice(1)) expect(await findMessage(tdb.db, id)).toBeUndefined();
    } finally {
      await tdb.pool.query(`alter table ${part} drop constraint ${part}_public_id_key`);
    }
  });

  it('of no message is not found, whatever it looks like, and without an index of random ids nothing is probed but its day', async () => {
    const [m] = await insertMessages(tdb.db, [{ topic: 'thing.happened' }]);
    // The same day and id, another UUID: the public id is compared, not only its parts.
    const forged = m!.public_id.replace(/.$/, (c) => (c === '0' ? '1' : '0'));
    for (const id of [forged, randomUUID(), '00000000-0000-0000-0000-000000000000']) expect(await findMessage(tdb.db, id)).toBeUndefined();
    const plans = await outboxPlansOf(tdb.url, async ({ db }) => {
      await findMessage(db, forged);
      await findMessage(db, randomUUID());
    });
    expect(plans.length).toBeGreaterThanOrEqual(1);
    for (const p of plans) expect(p).not.toMatch(/Seq Scan/);
  });
});
