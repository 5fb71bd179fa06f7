import { beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { AckPolicy, DeliverPolicy, DiscardPolicy, jetstream, ReplayPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { headers, nanos } from '@nats-io/transport-node';
import pino from 'pino';
import { loadConfig, type Config } from '../../../src/config.ts';
import { runGroup } from '../../../src/events/consumer.ts';
import { ensureGroup, GroupConfigError, type GroupOptions } from '../../../src/events/group.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import {
  desiredStream,
  duplicateWindowSeconds,
  ensureStream,
  outboxRetrySpanSeconds,
  StreamConfigError,
} from '../../../src/events/stream.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The stream and the consumer groups as they exist on the server versus the configuration: a
 * setting that can lose or drop events is brought back in place when JetStream allows it, and
 * otherwise the process refuses to start naming every difference.
 */

const skip = skipWithoutNats();
const tdb = useTestDatabase('evstream', { truncate: 'outbox' });
const nats = useNats(skip, { client: true });
let stream = 'S';
beforeEach(() => {
  stream = freshStream('S');
});

const env = (extra: Record<string, string> = {}) => eventsEnv(tdb.url, nats.url, stream, extra);
const config = (extra: Record<string, string> = {}): Config => loadConfig(env(extra));

async function publish(subject: string, n: number, body: (i: number) => unknown = (i) => ({ i })) {
  const js = jetstream(nats.nc);
  for (let i = 0; i < n; i++) {
    const h = headers();
    h.set('StayHub-Topic', 'booking.created');
    await js.publish(subject, JSON.stringify(body(i)), { msgID: `${subject}-${i}-${Math.random()}`, headers: h });
  }
}

describe.skipIf(skip)('events stream settings', () => {
  it('brings back in place every stream limit that would drop events, and the stream then keeps them all', async () => {
    const want = desiredStream(config());
    await nats.jsm.streams.add({
      ...want,
      max_msgs: 2,
      max_bytes: 4096,
      max_msgs_per_subject: 1,
      max_msg_size: 64,
      discard: DiscardPolicy.New,
      discard_new_per_subject: true,
      subjects: [...want.subjects!, 'elsewhere.>'],
      max_age: nanos(60_000),
      duplicate_window: nanos(30_000),
    });
    // As the relay: subjects, max age and the duplicate window are its settings (see below).
    await ensureStream(nats.jsm, want, { role: 'relay' });
    const info = await nats.jsm.streams.info(stream);
    expect(info.config).toMatchObject({
      subjects: want.subjects,
      max_msgs: -1,
      max_bytes: -1,
      max_msgs_per_subject: -1,
      max_msg_size: -1,
      discard: DiscardPolicy.Old,
      max_age: want.max_age,
      duplicate_window: want.duplicate_window,
    });
    expect(info.config.discard_new_per_subject ?? false).toBe(false);
    // Three events on one subject, one bigger than 64 bytes: all kept.
    await publish(`${stream.toLowerCase()}.booking.created`, 3, (i) => ({ i, pad: 'x'.repeat(100) }));
    expect((await nats.jsm.streams.info(stream)).state.messages).toBe(3);
  });

  it('the worker says ready only once the stream keeps every event: max_msgs_per_subject=1 set by hand is undone', async () => {
    await nats.jsm.streams.add({ ...desiredStream(config()), max_msgs_per_subject: 1 });
    await insertMessages(tdb.db, [
      { topic: 'booking.created', key: 'k-1', payload: bookingPayload() },
      { topic: 'booking.created', key: 'k-2', payload: bookingPayload() },
      { topic: 'booking.created', key: 'k-3', payload: bookingPayload() },
    ]);
    const err: string[] = [];
    const code = await drainOutbox({ argv: ['--until-empty'], env: env(), out: () => {}, err: (l) => err.push(l) });
    expect(code, err.join('\n')).toBe(0);
    expect(await readStream(nats.url, stream)).toHaveLength(3);
  });

  it('refuses to start naming every stream setting JetStream cannot change in place, and changes nothing', async () => {
    const want = desiredStream(config());
    await nats.jsm.streams.add({ ...want, storage: StorageType.Memory, retention: RetentionPolicy.Workqueue, max_msgs_per_subject: 1 });
    const error = await ensureStream(nats.jsm, want).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StreamConfigError);
    const message = (error as Error).message;
    expect(message).not.toContain('\n');
    expect(message).toContain(`stream ${stream}`);
    expect(message).toContain('retention: have workqueue, want limits (cannot change in place)');
    expect(message).toContain('storage: have memory, want file (cannot change in place)');
    expect(message).toContain('max_msgs_per_subject: have 1, want -1');
    expect(message).toMatch(/nats stream rm /);
    // Nothing half-done: the fixable difference is still there.
    expect((await nats.jsm.streams.info(stream)).config.max_msgs_per_subject).toBe(1);

    // The worker says the same, with exit code 2.
    const err: string[] = [];
    const code = await drainOutbox({ argv: ['--until-empty'], env: env(), out: () => {}, err: (l) => err.push(l) });
    expect(code).toBe(2);
    expect(err.join('\n')).toMatch(/retention: have workqueue, want limits .*storage: have memory, want file/);
  });

  it('refuses a sealed stream (it takes no more events and cannot be unsealed)', async () => {
    const want = desiredStream(config());
    await nats.jsm.streams.add(want);
    // Not in the client's update type: sealing is one-way.
    await nats.jsm.streams.update(stream, { ...(await nats.jsm.streams.info(stream)).config, sealed: true } as Parameters<
      typeof nats.jsm.streams.update
    >[1]);
    await expect(ensureStream(nats.jsm, want)).rejects.toThrow(/sealed: have true, want false \(cannot change in place\)/);
  });
});

describe.skipIf(skip)('events consumer group settings', () => {
  const groupOptions = (extra: Partial<GroupOptions> = {}): GroupOptions => ({
    stream,
    group: 'g',
    filterSubject: `${stream.toLowerCase()}.>`,
    ackWaitSeconds: 1,
    maxDeliver: 3,
    batchSize: 10,
    ...extra,
  });

  it('brings back max_deliver and every other setting that drops or stalls events, so a failing event reaches its dead letter', async () => {
    await ensureStream(nats.jsm, desiredStream(config()));
    await nats.jsm.consumers.add(stream, {
      durable_name: 'g',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      // The server gives up after 2 deliveries: the group (maxDeliver 3) never sees the third and
      // records no dead letter.
      max_deliver: 2,
      ack_wait: nanos(60_000),
      filter_subject: `${stream.toLowerCase()}.booking.>`,
      max_ack_pending: 1,
      headers_only: true,
      max_batch: 1,
      max_expires: nanos(1000),
      inactive_threshold: nanos(3600_000),
    });
    const o = groupOptions();
    await ensureGroup(nats.jsm, o);
    const c = (await nats.jsm.consumers.info(stream, 'g')).config;
    expect(c).toMatchObject({ max_deliver: -1, ack_wait: nanos(1000), filter_subject: o.filterSubject, max_ack_pending: 1000 });
    expect(c.headers_only ?? false).toBe(false);
    expect(c.max_batch ?? 0).toBe(0);
    expect(c.max_expires ?? 0).toBe(0);
    expect(c.inactive_threshold ?? 0).toBe(0);

    await publish(`${stream.toLowerCase()}.booking.created`, 1);
    const runner = await runGroup({
      ...o,
      nc: nats.nc,
      db: tdb.db,
      log: pino({ level: 'silent' }),
      handle: async () => {
        throw new Error('always fails');
      },
    });
    try {
      await waitFor(
        async () => {
          const { rows } = await tdb.db.execute<{ deliveries: number }>(
            sql`select deliveries from consumer_dead_letters where consumer_group = 'g' and subject like ${`${stream.toLowerCase()}.%`}`,
          );
          return rows[0]?.deliveries === 3;
        },
        20_000,
        'the failing event dead-lettered on its 3rd delivery',
      );
    } finally {
      await runner.stop();
    }
  }, 60_000);

  it('refuses to start naming every group setting JetStream cannot change in place', async () => {
    await ensureStream(nats.jsm, desiredStream(config()));
    await nats.jsm.consumers.add(stream, {
      durable_name: 'g',
      ack_policy: AckPolicy.All,
      deliver_policy: DeliverPolicy.New,
      replay_policy: ReplayPolicy.Original,
      max_deliver: 2,
    });
    const error = await ensureGroup(nats.jsm, groupOptions()).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(GroupConfigError);
    const message = (error as Error).message;
    expect(message).not.toContain('\n');
    expect(message).toContain(`group g on stream ${stream}`);
    expect(message).toContain('ack_policy: have all, want explicit (cannot change in place)');
    expect(message).toContain('deliver_policy: have new, want all (cannot change in place)');
    expect(message).toContain('replay_policy: have original, want instant (cannot change in place)');
    expect(message).toContain('max_deliver: have 2, want -1');
    expect(message).toMatch(/--replay/);
    // Nothing half-done.
    expect((await nats.jsm.consumers.info(stream, 'g')).config.max_deliver).toBe(2);
  });

  it('accepts a group that starts at a time or a sequence (a replay made it so), and keeps its position', async () => {
    await ensureStream(nats.jsm, desiredStream(config()));
    await publish(`${stream.toLowerCase()}.booking.created`, 3);
    await nats.jsm.consumers.add(stream, {
      durable_name: 'g',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: 2,
      max_deliver: -1,
      filter_subject: `${stream.toLowerCase()}.>`,
      ack_wait: nanos(1000),
      max_ack_pending: 1000,
    });
    const info = await ensureGroup(nats.jsm, groupOptions());
    expect(info.num_pending).toBe(2);
  });
});

describe.skipIf(skip)('the duplicate window belongs to the relay', () => {
  const windowSeconds = async () => (await nats.jsm.streams.info(stream)).config.duplicate_window / 1e9;
  const consume = async (extra: Record<string, string> = {}) => {
    const err: string[] = [];
    const code = await earningsMain({ argv: ['--until-empty'], env: env(extra), out: () => {}, err: (l) => err.push(l) });
    return { code, err };
  };

  it("a consumer started with defaults leaves the worker's longer window and max age alone", async () => {
    const worker = { EVENTS_DUPLICATE_WINDOW_SECONDS: '2778', EVENTS_MAX_AGE_SECONDS: String(30 * 24 * 3600) };
    expect(await drainOutbox({ argv: ['--until-empty'], env: env(worker), out: () => {}, err: () => {} })).toBe(0);
    expect(await windowSeconds()).toBe(2778);
    // Its own defaults would say 794 s and 7 days.
    expect(duplicateWindowSeconds(config())).toBe(794);
    const r = await consume();
    expect(r.code, r.err.join('\n')).toBe(0);
    expect(await windowSeconds()).toBe(2778);
    expect((await nats.jsm.streams.info(stream)).config.max_age).toBe(30 * 24 * 3600 * 1e9);
    // ensureStream called as the consumer calls it, likewise.
    await ensureStream(nats.jsm, desiredStream(config()));
    expect(await windowSeconds()).toBe(2778);
  });

  it('a consumer that finds no stream creates it, with the window it computes', async () => {
    const r = await consume();
    expect(r.code, r.err.join('\n')).toBe(0);
    expect(await windowSeconds()).toBe(duplicateWindowSeconds(config()));
  });

  it('the relay sets the window it computes (never below its retry span), over whatever the stream had', async () => {
    expect((await consume()).code).toBe(0);
    expect(await windowSeconds()).toBe(794);
    // A longer lease: a longer retry span, so a longer window.
    const worker = { LEASE_SECONDS: '300' };
    expect(outboxRetrySpanSeconds(config(worker))).toBe(8 * 300 + 254);
    expect(await drainOutbox({ argv: ['--until-empty'], env: env(worker), out: () => {}, err: () => {} })).toBe(0);
    expect(await windowSeconds()).toBe(8 * 300 + 254 + 60);
    // And below its retry span it refuses to start, leaving the stream as it is.
    const err: string[] = [];
    const code = await drainOutbox({
      argv: ['--until-empty'],
      env: env({ ...worker, EVENTS_DUPLICATE_WINDOW_SECONDS: '900' }),
      out: () => {},
      err: (l) => err.push(l),
    });
    expect(code).toBe(2);
    expect(err.join('\n')).toMatch(/shorter than the outbox's retry span \(2654 s/);
    expect(await windowSeconds()).toBe(2714);
  });

  it('a consumer still refuses a stream whose subjects do not hold its own, and fixes the limits every process wants', async () => {
    const want = desiredStream(config());
    await nats.jsm.streams.add({ ...want, subjects: ['elsewhere.>'], max_msgs_per_subject: 1 });
    await expect(ensureStream(nats.jsm, want)).rejects.toThrow(
      new RegExp(`subjects: have \\[elsewhere\\.>\\], want \\[${stream.toLowerCase()}\\.>\\]`),
    );
    await nats.jsm.streams.update(stream, {
      ...(await nats.jsm.streams.info(stream)).config,
      subjects: [...want.subjects!, 'elsewhere.>'],
    });
    const info = await ensureStream(nats.jsm, want);
    expect(info.config.max_msgs_per_subject).toBe(-1);
    // The relay's to change: a subject beside ours stays.
    expect(info.config.subjects).toContain('elsewhere.>');
  });
});
