import { withClient } from '../lib/postgres.ts';

/*
 * A bookings table holding years of past stays (the api-history section): the write path measured
 * on it against an empty one.
 */

/** Stays per history property: two nights every three days, going back 600 days. */
const STAYS_PER_PROPERTY = 200;

/**
 * `bookings` confirmed past stays, inserted in SQL before the API starts: ⌈bookings / 200⌉
 * properties of their own host, each with 200 two-night stays, one every three days going back
 * from yesterday (600 days). They never overlap one another (the exclusion constraint checks each
 * one) nor any stay the bench books: those are on other properties, and in the future. No outbox
 * rows with them: the outbox's own history is what the purge and growth sections measure.
 */
export async function fillBookingHistory(url: string, bookings: number): Promise<void> {
  const properties = Math.ceil(bookings / STAYS_PER_PROPERTY);
  await withClient(
    url,
    async (c) => {
      const { rows } = await c.query<{ id: string }>(
        `insert into users (email, name, role, password_hash)
       values ('history-host@example.test', 'History host', 'host', 'x'), ('history-guest@example.test', 'History guest', 'guest', 'x')
       returning id`,
      );
      const [host, guest] = rows.map((r) => r.id);
      await c.query(
        `insert into properties (host_id, title, city, country, nightly_price, cleaning_fee, max_guests)
       select $1::bigint, 'History flat ' || i, 'Lisbon', 'PT', 10000, 2500, 4 from generate_series(1, $2::int) i`,
        [host, properties],
      );
      await c.query(
        `insert into bookings (property_id, guest_id, check_in, check_out, guests, currency, nights, nightly_price, subtotal, cleaning_fee, service_fee, total,
                             created_at, updated_at)
       select p.id, $1::bigint, current_date - 3 * (j + 1), current_date - 3 * (j + 1) + 2, 2, 'EUR', 2, 10000, 20000, 2500, 2700, 25200,
              now() - (3 * (j + 1) + 30) * interval '1 day', now() - (3 * (j + 1) + 30) * interval '1 day'
         from (select id, row_number() over (order by id) - 1 as n from properties where host_id = $2::bigint) p
        cross join generate_series(0, ${STAYS_PER_PROPERTY - 1}) j
        where p.n * ${STAYS_PER_PROPERTY} + j < $3::int`,
        [guest, host, bookings],
      );
      await c.query('vacuum analyze');
    },
    'bench-history',
  );
}
