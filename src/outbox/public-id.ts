import { run, statement, unnamed, type Executor } from './executor.ts';

/*
 * A message by its public id, without an index on public_id (migration 0003, ADR 0051). A public
 * id written since that migration is derived from its row (outbox_public_id: a UUIDv7 of the
 * row's created_at to the millisecond, the id in its last 62 bits), so it says where its row is:
 * created_at in one millisecond, which prunes the statement to one day, and the id, one probe of
 * that day's primary key. The public id itself is compared too, so a UUID that only looks derived
 * finds nothing there.
 *
 * The rows of the release before carry random UUIDv7s. Their days kept their unique index on
 * public_id (the migration dropped it only from days still empty), so a public id not found by its
 * parts is looked for in those days only, one probe of each day's unique index, and in no other:
 * whatever a client sends, a lookup costs a primary-key probe and a probe per day kept, never a
 * scan of a day. The days kept leave with the retention, and the fallback with them.
 */

const VERSION_7_NO_RANDOM = /^[0-9a-f]{12}7000[89ab][0-9a-f]{15}$/;
/** The last instant a timestamptz and a JavaScript ISO string both hold: 9999-12-31. */
const LAST_MS = 253_402_300_799_999;
const ID_BITS = (1n << 62n) - 1n;

/** Where a derived public id says its row is, or null when it cannot be one (any other UUID). */
export function publicIdParts(publicId: string): { createdFrom: string; createdTo: string; id: string } | null {
  const hex = publicId.toLowerCase().replace(/-/g, '');
  if (!VERSION_7_NO_RANDOM.test(hex)) return null;
  const ms = parseInt(hex.slice(0, 12), 16);
  if (ms > LAST_MS) return null;
  return {
    createdFrom: new Date(ms).toISOString(),
    createdTo: new Date(ms + 1).toISOString(),
    id: (BigInt(`0x${hex.slice(16)}`) & ID_BITS).toString(),
  };
}

/** The days that still have a unique index on public_id: those that hold rows of the release before. */
const DAYS_WITH_RANDOM_IDS = statement(
  'outbox-days-with-random-public-ids',
  `select c.conrelid::regclass::text as part
     from pg_constraint c join pg_inherits i on i.inhrelid = c.conrelid
    where i.inhparent = 'outbox'::regclass and c.contype = 'u'
      and c.conkey = array[(select attnum from pg_attribute where attrelid = c.conrelid and attname = 'public_id')]
    order by 1`,
);

/**
 * A reader of `columns` (SQL over the outbox row, unqualified) of the message whose public id is
 * given, or undefined. `name` names its statement.
 */
export function byPublicId<R extends Record<string, unknown>>(name: string, columns: string) {
  const byParts = statement(
    name,
    `select ${columns} from outbox
      where created_at >= $2::timestamptz and created_at < $3::timestamptz and id = $4 and public_id = $1::uuid`,
  );
  return async (q: Executor, publicId: string): Promise<R | undefined> => {
    const parts = publicIdParts(publicId);
    if (parts) {
      const [row] = await run<R>(q, byParts, [publicId, parts.createdFrom, parts.createdTo, parts.id]);
      if (row) return row;
    }
    const days = await run<{ part: string }>(q, DAYS_WITH_RANDOM_IDS, []);
    if (days.length === 0) return undefined;
    // The days' names are in the text (from the catalogue, quoted by regclass): unnamed, so no
    // connection keeps a statement per set of days.
    const probes = days.map((d) => `(select ${columns} from ${d.part} where public_id = $1::uuid)`).join(' union all ');
    const [row] = await run<R>(q, unnamed(`select * from (${probes}) as found limit 1`), [publicId]);
    return row;
  };
}
