import { describe, expect, it } from 'vitest';
import { claimDeliveries, type ClaimedDelivery } from '../../../src/webhooks/delivery/claim.ts';
import { recordSuccesses } from '../../../src/webhooks/delivery/record.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { plansOf } from '../../helpers/statement-plans.ts';

/*
 * The sender's group commit of successes (recordSuccesses) settles each delivery through its
 * primary key, whatever the statistics say of the pending ones. Written with the single-row fence,
 * its plan read every pending delivery (through the pending index) once per batch when the
 * statistics, taken while the table was empty, said none was pending: a backlog of N made each
 * batch cost N. The lease core's batch fence (src/outbox/lease/leased-table.ts batchFence) and the
 * ids as an array keep it to one probe per delivery.
 */

const tdb = useTestDatabase('successes');

const success = (d: ClaimedDelivery) => ({
  d,
  result: { status: 204, body: null, retryAfterSeconds: null, durationMs: 3, error: null },
  traceId: null,
});

describe('recording a batch of successes', () => {
  it('probes each delivery by its primary key, with 2,000 pending and statistics that say none', async () => {
    // Statistics taken on the empty table, as after a truncate or a quiet spell.
    await tdb.pool.query('analyze webhook_deliveries');
    const { rows: host } = await tdb.pool.query<{ id: string }>(
      `insert into users (email, name, role, password_hash) values ('host@successes.test', 'H', 'host', 'x') returning id`,
    );
    const { rows: endpoint } = await tdb.pool.query<{ id: string }>(
      `insert into webhook_endpoints (host_id, url, event_types, secret)
       values ($1, 'https://receiver.test/hook', '{booking.created}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') returning id`,
      [host[0]!.id],
    );
    await tdb.pool.query(
      `with ev as (
         insert into webhook_events (public_id, host_id, type, body, occurred_at)
         select gen_random_uuid(), $1, 'booking.created', '{}', now() from generate_series(1, 2000)
         returning id)
       insert into webhook_deliveries (event_id, endpoint_id) select ev.id, $2 from ev`,
      [host[0]!.id, endpoint[0]!.id],
    );
    const claimed = await claimDeliveries(tdb.pool, {
      limit: 20,
      perEndpoint: 20,
      perHost: 20,
      claimed: new Map(),
      hostClaimed: new Map(),
      leaseSeconds: 60,
    });
    expect(claimed).toHaveLength(20);
    // One of them no longer ours: its claim id is not the row's.
    const stale = { ...claimed[19]!, claimId: '00000000-0000-4000-8000-000000000000' };
    const batch = [...claimed.slice(0, 19), stale].map(success);

    let held: boolean[] = [];
    const plans = await plansOf(tdb.url, /update webhook_deliveries/, async ({ pool }) => {
      held = await recordSuccesses(pool, batch, 5);
    });
    expect(held).toEqual([...Array<boolean>(19).fill(true), false]);
    expect(plans).toHaveLength(1);
    const update = plans[0]!.slice(plans[0]!.indexOf('Update on webhook_deliveries'));
    expect(update).toMatch(/webhook_deliveries_pkey/);
    expect(update).not.toMatch(/webhook_deliveries_due_idx/);
    const { rows } = await tdb.pool.query<{ status: string; n: number }>(
      'select status, count(*)::int as n from webhook_deliveries group by status order by status',
    );
    expect(rows).toEqual([
      { status: 'pending', n: 1981 },
      { status: 'succeeded', n: 19 },
    ]);
  });
});
