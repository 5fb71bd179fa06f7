import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { loadConfig } from '../../../src/config.ts';
import { runGroup } from '../../../src/events/consumer.ts';
import type { EventOutcome } from '../../../src/events/handle-event.ts';
import { openDeadLetters } from '../../../src/events/dead-letters.ts';
import { desiredStream, ensureStream } from '../../../src/events/stream.ts';
import { useTestApp } from '../../helpers/app.ts';
import { eventsEnv, freshStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A consumer reads only the schema versions it was written for: an event of another version (a
 * newer producer) is dead-lettered at its first delivery with the reason, never read as the
 * version it knows.
 */

const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip, { client: true });

describe.skipIf(skip)('an event in a schema version the consumer does not know', () => {
  it('is dead-lettered at once, naming the version; the events around it are applied', async () => {
    const stream = freshStream('V');
    const prefix = stream.toLowerCase();
    await ensureStream(nats.jsm, desiredStream(loadConfig(eventsEnv(t.db.url, nats.url, stream))));
    const applied: string[] = [];
    const outcomes: EventOutcome[] = [];
    const runner = await runGroup({
      stream,
      group: 'versions',
      filterSubject: `${prefix}.>`,
      ackWaitSeconds: 1,
      maxDeliver: 5,
      batchSize: 10,
      nc: nats.nc,
      db: t.db.db,
      log: pino({ level: 'silent' }),
      handle: async (_tx, e) => void applied.push(e.messageId),
      onOutcome: (o) => outcomes.push(o),
    });
    try {
      const js = jetstream(nats.nc);
      for (const [id, version] of [
        [`${stream}-v1`, '1'],
        [`${stream}-v99`, '99'],
        [`${stream}-v0`, '0'],
        [`${stream}-vx`, 'two'],
        [`${stream}-v1b`, '1'],
      ] as const) {
        const h = headers();
        h.set('StayHub-Topic', 'booking.created');
        h.set('StayHub-Schema-Version', version);
        await js.publish(`${prefix}.booking.created`, JSON.stringify({ id }), { msgID: id, headers: h });
      }
      await waitFor(async () => outcomes.length >= 5, 15_000, 'five events handled');
      expect(applied).toEqual([`${stream}-v1`, `${stream}-v1b`]);
      expect(outcomes.filter((o) => o === 'dead')).toHaveLength(3);
      const dead = await openDeadLetters(t.db.db, 'versions');
      expect(dead.map((d) => [d.message_id, d.deliveries])).toEqual([
        [`${stream}-v99`, 1],
        [`${stream}-v0`, 1],
        [`${stream}-vx`, 1],
      ]);
      expect(dead[0]!.last_error).toMatch(/UnknownSchemaVersionError: .*StayHub-Schema-Version "99".*reads version 1/);
      // Versions start at 1: a 0 is no version this consumer was written for.
      expect(dead[1]!.last_error).toMatch(/UnknownSchemaVersionError: .*StayHub-Schema-Version "0"/);
      expect(dead[2]!.last_error).toMatch(/StayHub-Schema-Version "two"/);
    } finally {
      await runner.stop();
    }
  });
});
