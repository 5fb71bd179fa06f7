import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers } from '@nats-io/transport-node';
import type { Config } from '../../src/config.ts';
import { ensureGroup } from '../../src/events/group.ts';
import { desiredStream, ensureStream } from '../../src/events/stream.ts';

/**
 * The events stream of `config` (EVENTS_STREAM, EVENTS_SUBJECT_PREFIX) with three consumer groups
 * in three states, for the admin view's tests:
 *   5 events: 3 × <prefix>.booking.created, then 2 × <prefix>.property.changed
 *   `all`      reads <prefix>.>: 2 events fetched and not acked (ack wait 60 s), 3 not delivered
 *   `bookings` reads <prefix>.booking.>: nothing delivered, 3 waiting
 *   `props`    reads <prefix>.property.>: both fetched and acked (caught up)
 * Waits `ageMs` after publishing, so the oldest unacked event is at least that old.
 */
export async function seedEventGroups(natsUrl: string, config: Config, ageMs = 1100): Promise<void> {
  const nc = await connect({ servers: natsUrl.replace('nats://', '') });
  try {
    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm, desiredStream(config));
    const js = jetstream(nc);
    const p = config.EVENTS_SUBJECT_PREFIX;
    const topics = ['booking.created', 'booking.created', 'booking.created', 'property.changed', 'property.changed'];
    for (const [i, topic] of topics.entries()) {
      const h = headers();
      h.set('StayHub-Topic', topic);
      await js.publish(`${p}.${topic}`, JSON.stringify({ i }), { msgID: `seed-${i}`, headers: h });
    }
    const group = (name: string, filterSubject: string) =>
      ensureGroup(jsm, { stream: config.EVENTS_STREAM, group: name, filterSubject, ackWaitSeconds: 60, maxDeliver: 5, batchSize: 10 });
    await group('all', `${p}.>`);
    await group('bookings', `${p}.booking.>`);
    await group('props', `${p}.property.>`);

    const take = async (name: string, n: number, ack: boolean) => {
      const consumer = await js.consumers.get(config.EVENTS_STREAM, name);
      let got = 0;
      while (got < n) {
        const m = await consumer.next({ expires: 5000 });
        if (!m) throw new Error(`group ${name}: no event within 5 s`);
        got++;
        if (ack) await m.ackAck();
      }
    };
    await take('all', 2, false);
    await take('props', 2, true);
  } finally {
    await nc.close();
  }
  await new Promise((r) => setTimeout(r, ageMs));
}
