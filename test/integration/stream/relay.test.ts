import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { loadConfig } from '../../../src/config.ts';
import { main } from '../../../src/commands/drain-outbox.ts';
import { duplicateWindowSeconds, outboxRetrySpanSeconds } from '../../../src/events/stream.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { startTcpProxy } from '../../../scripts/lib/tcp-proxy.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The events relay against a real nats-server: the stream it creates, what it publishes, and the
 * guarantees (once per outbox message through a SIGKILL between PubAck and DONE, per-key order,
 * a NATS outage that loses nothing).
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const skip = skipWithoutNats();

const tdb = useTestDatabase('evrelay', { truncate: 'outbox' });
const nats = useNats(skip);
let stream = 'T';
beforeEach(() => {
  stream = freshStream('T');
});

const env = (extra: Record<string, string> = {}) => eventsEnv(tdb.url, nats.url, stream, extra);

async function drain(extra: Record<string, string> = {}, argv = ['--until-empty']) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main({ argv, env: env(extra), out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out, err };
}

function bookings(n: number, keys: number) {
  return Array.from({ length: n }, (_, i) => ({
    topic: i % 3 === 2 ? 'booking.cancelled' : 'booking.created',
    key: `key-${i % keys}`,
    payload: i % 3 === 2 ? { ...bookingPayload(), cancelledBy: 'guest' } : bookingPayload(),
  }));
}

async function statuses() {
  const { rows } = await tdb.db.execute<{ status: string; n: number }>(sql`select status, count(*)::int as n from outbox group by status`);
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/**
 * Messages whose event is in the stream: DONE, with no relay work of theirs still waiting in the
 * relay's lane (src/outbox/lanes.ts). A message whose relay failed is DONE at once; its event is not.
 */
async function relayed(): Promise<number> {
  const { rows } = await tdb.db.execute<{ n: number }>(sql`
    select count(*)::int as n from outbox o
     where o.lane is null and o.status = 'DONE'
       and not exists (select 1 from outbox l where l.origin_id = o.public_id and l.status <> 'DONE')`);
  return rows[0]!.n;
}

describe.skipIf(skip)('events relay', () => {
  it('is listed by --list-topics when NATS_URL is set, and only then', async () => {
    const withNats = await drain({}, ['--list-topics']);
    expect(withNats.code).toBe(0);
    expect(withNats.out).toContain(
      'booking.created: email.guest-confirmation, email.host-new-booking, webhooks.booking-created, events.relay',
    );
    expect(withNats.out.some((l) => l.startsWith('property.changed:') && l.includes('events.relay'))).toBe(true);
    const only = await drain({ EVENTS_TOPICS: 'booking.cancelled' }, ['--list-topics']);
    expect(only.out.filter((l) => l.includes('events.relay'))).toEqual([expect.stringMatching(/^booking\.cancelled:/)]);
    const without = await drain({ NATS_URL: '' }, ['--list-topics']);
    expect(without.out.join('\n')).not.toContain('events.relay');
  });

  it('creates the stream from configuration: file storage, max age, replicas, a duplicate window longer than the retry span', async () => {
    const { code } = await drain({ EVENTS_MAX_AGE_SECONDS: '3600' });
    expect(code).toBe(0);
    const nc = await connect({ servers: nats.url.replace('nats://', '') });
    try {
      const info = await (await jetstreamManager(nc)).streams.info(stream);
      const config = loadConfig(env());
      expect(info.config.storage).toBe(StorageType.File);
      expect(info.config.subjects).toEqual([`${stream.toLowerCase()}.>`]);
      expect(info.config.max_age).toBe(3600 * 1e9);
      expect(info.config.num_replicas).toBe(1);
      expect(info.config.duplicate_window).toBe(duplicateWindowSeconds(config) * 1e9);
      // Defaults: 8 attempts × 60 s lease + (2+4+…+128 s) backoff = 734 s; the window adds a minute.
      expect(outboxRetrySpanSeconds(config)).toBe(734);
      expect(info.config.duplicate_window / 1e9).toBeGreaterThan(outboxRetrySpanSeconds(config));

      // A later start with a new max age updates the stream in place.
      expect((await drain({ EVENTS_MAX_AGE_SECONDS: '7200' })).code).toBe(0);
      expect((await (await jetstreamManager(nc)).streams.info(stream)).config.max_age).toBe(7200 * 1e9);
    } finally {
      await nc.close();
    }
  });

  it('refuses to start, with a clear error, when the stream exists in a form it cannot update', async () => {
    const nc = await connect({ servers: nats.url.replace('nats://', '') });
    try {
      await (
        await jetstreamManager(nc)
      ).streams.add({ name: stream, subjects: [`${stream.toLowerCase()}.>`], storage: StorageType.Memory });
    } finally {
      await nc.close();
    }
    const { code, err } = await drain();
    expect(code).toBe(2);
    expect(err.join('\n')).toMatch(
      new RegExp(`stream ${stream} does not match the configuration: .*storage: have memory, want file \\(cannot change in place\\)`),
    );
  });

  it('refuses a duplicate window shorter than the outbox retry span', async () => {
    const { code, err } = await drain({ EVENTS_DUPLICATE_WINDOW_SECONDS: '60' });
    expect(code).toBe(2);
    expect(err.join('\n')).toMatch(/shorter than the outbox's retry span \(734 s/);
  });

  it('publishes each event with its subject, headers and body (no contact details), and only relayed topics', async () => {
    const [created, changed] = await insertMessages(tdb.db, [
      { topic: 'booking.created', key: 'b-1', payload: bookingPayload({ total: 1234 }) },
      { topic: 'property.changed', key: 'p-1', payload: { propertyId: '8d7f5a52-8f0e-4d59-9f52-2a3c9b0f6a11' } },
    ]);
    const { code } = await drain({ EVENTS_TOPICS: 'booking.created' });
    expect(code).toBe(0);
    const events = await readStream(nats.url, stream);
    expect(events).toHaveLength(1);
    const [e] = events;
    const { rows } = await tdb.db.execute<{ created_at: Date }>(sql`select created_at from outbox where id = ${created!.id}`);
    expect(e!.subject).toBe(`${stream.toLowerCase()}.booking.created`);
    expect(e!.msgId).toBe(created!.public_id);
    expect(e!.headers).toMatchObject({
      'StayHub-Topic': 'booking.created',
      'StayHub-Key': 'b-1',
      'StayHub-Outbox-Id': created!.public_id,
      'StayHub-Occurred-At': new Date(rows[0]!.created_at).toISOString(),
      'StayHub-Schema-Version': '1',
    });
    expect(e!.body).toMatchObject({ total: 1234, currency: 'EUR' });
    expect(e!.body).not.toHaveProperty('guestEmail');
    expect(e!.body).not.toHaveProperty('hostEmail');
    // Not relayed: property.changed has no relay handler, only its search handler ran.
    const { rows: ch } = await tdb.db.execute<{ handlers_done: string[] }>(sql`select handlers_done from outbox where id = ${changed!.id}`);
    expect(ch[0]!.handlers_done).not.toContain('events.relay');
  });

  it('pipelines publishes: many PubAcks outstanding at once, not one at a time', async () => {
    // Every server reply arrives 200 ms late. One publish at a time, a drain of 64 messages cannot
    // take less than 64 × 200 ms = 12.8 s however fast the machine; with 16 handlers in flight it
    // takes about 4 × 200 ms plus the slower connect and stream check, so a busy machine has
    // seconds to spare before the bound.
    await insertMessages(tdb.db, bookings(64, 64));
    const proxy = await startTcpProxy(`nats://127.0.0.1:${nats.port}`, { replyDelayMs: 200 });
    let seconds: number;
    try {
      const started = performance.now();
      const { code } = await drain({ NATS_URL: proxy.url, WORKER_CONCURRENCY: '16', WORKER_BATCH_SIZE: '64' });
      seconds = (performance.now() - started) / 1000;
      expect(code).toBe(0);
    } finally {
      await proxy.close();
    }
    expect(await statuses()).toEqual({ DONE: 64 });
    expect(seconds, 'seconds the drain took: one publish at a time cannot take less than 12.8').toBeLessThan(64 * 0.2);
    expect(await readStream(nats.url, stream)).toHaveLength(64);
  }, 60_000);

  it('keeps per-key order in the stream with many messages in flight', async () => {
    const msgs = await insertMessages(tdb.db, bookings(240, 12));
    const { code } = await drain({ WORKER_CONCURRENCY: '32', WORKER_BATCH_SIZE: '100' });
    expect(code).toBe(0);
    expect(await statuses()).toEqual({ DONE: 240 });
    const events = await readStream(nats.url, stream);
    expect(events).toHaveLength(240);
    const idOf = new Map(msgs.map((m) => [m.public_id, m.id]));
    const perKey = new Map<string, number[]>();
    for (const e of events) {
      const k = e.headers['StayHub-Key']!;
      perKey.set(k, [...(perKey.get(k) ?? []), idOf.get(e.msgId!)!]);
    }
    expect(perKey.size).toBe(12);
    for (const ids of perKey.values()) expect(ids).toEqual([...ids].sort((a, b) => a - b));
  });

  it('stores one event per outbox message when the worker is SIGKILLed between PubAck and DONE', async () => {
    const msgs = await insertMessages(tdb.db, bookings(30, 30));
    const effects = path.join(mkdtempSync(path.join(os.tmpdir(), 'stayhub-fx-')), 'effects');
    writeFileSync(effects, '');
    // 1: the test entry relays and SIGKILLs itself right after its 10th PubAck.
    const killed = await runProcess('test/helpers/events-worker-entry.ts', ['--until-empty'], {
      ...env({ NATS_URL: '', LEASE_SECONDS: '1', WORKER_CONCURRENCY: '4' }),
      TEST_NATS_URL: nats.url,
      TEST_EFFECTS_FILE: effects,
      TEST_KILL_AFTER_PUBLISHES: '10',
    });
    expect(killed.signal).toBe('SIGKILL');
    const published = readFileSync(effects, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' ')[1]!);
    expect(published.length).toBeGreaterThanOrEqual(10);
    // The dead worker's statements already sent still complete (a DONE among them): wait until
    // its sessions are gone, so the outbox below is what it left.
    await waitFor(
      async () => {
        const { rows } = await tdb.db.execute<{ n: number }>(
          sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name like 'stayhub-worker%'`,
        );
        return rows[0]!.n === 0;
      },
      30_000,
      "the killed worker's sessions to end",
    );
    // 2 waits for the dead worker's leases to run out (LEASE_SECONDS=1): with one still running,
    // --until-empty would stop before that message was due.
    await waitFor(
      async () => {
        const { rows } = await tdb.db.execute<{ n: number }>(
          sql`select count(*)::int as n from outbox where status = 'PENDING' and leased_until > clock_timestamp()`,
        );
        return rows[0]!.n === 0;
      },
      30_000,
      "the killed worker's leases to run out",
    );
    // Some of what the server stored was never recorded as relayed: the worker died first. What the
    // server stored is read from the stream itself, as late as possible: publishes still in flight
    // at the SIGKILL (their PubAck never read, so not in the effects file) may have been stored too,
    // and the server may read them from the dead connection a moment after the kill.
    const stored = (await readStream(nats.url, stream)).map((e) => e.msgId);
    expect(stored).toEqual(expect.arrayContaining(published));
    const { rows: notDone } = await tdb.db.execute<{ public_id: string }>(
      sql`select public_id from outbox where status = 'PENDING' and not ('events.relay' = any(handlers_done))
            and public_id = any(${sql.param(stored)}::uuid[])`,
    );
    expect(notDone.length).toBeGreaterThanOrEqual(1);

    // 2: the real worker, with the usual lease: a 1 s lease, which a loaded machine can let run
    // out under a handler, would publish a message twice in this run.
    writeFileSync(effects, '');
    const again = await runProcess('test/helpers/events-worker-entry.ts', ['--until-empty'], {
      ...env({ NATS_URL: '' }),
      TEST_NATS_URL: nats.url,
      TEST_EFFECTS_FILE: effects,
    });
    expect(again.code).toBe(0);
    expect(await statuses()).toEqual({ DONE: 30 });
    // The republished ones were acked as duplicates: the server dropped them.
    const rerun = readFileSync(effects, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' '));
    const dupIds = rerun.filter((f) => f[3] === 'true').map((f) => f[1]);
    expect(dupIds.sort()).toEqual(notDone.map((r) => r.public_id).sort());

    const events = await readStream(nats.url, stream);
    expect(events.map((e) => e.msgId).sort()).toEqual(msgs.map((m) => m.public_id).sort());
  }, 60_000);

  it('loses nothing when nats-server is stopped and restarted mid-run', async () => {
    const msgs = await insertMessages(tdb.db, bookings(300, 20));
    const proc = spawnWorker('src/commands/drain-outbox.ts', [], {
      ...env({
        BACKOFF_BASE_SECONDS: '0.2',
        BACKOFF_MAX_SECONDS: '1',
        MAX_ATTEMPTS: '100',
        EVENTS_PUBLISH_TIMEOUT_MS: '500',
        WORKER_BATCH_SIZE: '5',
        WORKER_CONCURRENCY: '4',
      }),
    });
    try {
      // Let part of the backlog through, then take the server away.
      await waitFor(async () => (await relayed()) >= 20, 20_000, 'first events relayed');
      await nats.stop();
      const stoppedAt = await relayed();
      // The worker has met the outage once a publish failed and was scheduled for a retry.
      await waitFor(
        async () => {
          const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where last_error is not null`);
          return rows[0]!.n > 0;
        },
        30_000,
        'a publish to fail while nats-server is down',
      );
      expect(await relayed()).toBeLessThan(300); // the outage held events back…
      expect((await statuses()).DEAD ?? 0).toBe(0);
      await nats.start();
      await waitFor(async () => (await relayed()) === 300 && !(await statuses()).PENDING, 30_000, 'all events relayed after the restart');
      expect(stoppedAt).toBeLessThan(300);
    } finally {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }
    const events = await readStream(nats.url, stream);
    const ids = events.map((e) => e.msgId);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.sort()).toEqual(msgs.map((m) => m.public_id).sort());
  }, 90_000);
});

function spawnWorker(entry: string, args: string[], envVars: Record<string, string>) {
  const { DATABASE_URL: _a, NATS_URL: _b, ...inherited } = process.env;
  return spawn(process.execPath, entryArgs(entry, ...args), {
    cwd: ROOT,
    env: { ...inherited, ...envVars },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

function runProcess(entry: string, args: string[], envVars: Record<string, string>) {
  const child = spawnWorker(entry, args, envVars);
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
}
