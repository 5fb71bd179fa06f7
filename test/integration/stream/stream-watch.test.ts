import { execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { nanos } from '@nats-io/transport-node';
import pino from 'pino';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../../src/config.ts';
import { createJetStreamPublisher } from '../../../src/events/publisher.ts';
import { payloadAsRelayed, relayMessage } from '../../../src/events/relay.ts';
import { startStreamWatch, type StreamWatch } from '../../../src/events/stream-watch.ts';
import { desiredStream, ensureStream, StreamConfigError } from '../../../src/events/stream.ts';
import { createWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { useTestApp } from '../../helpers/app.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { skipWithout } from '../../helpers/tools.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { sleep, waitFor } from '../../helpers/wait.ts';

/*
 * The worker's watch over the live stream (src/events/stream-watch.ts): settings changed by hand
 * are brought back within EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS (1 s here) and counted; what
 * cannot be brought back is reported; a shorter max age is refused at start unless allowed. And
 * the alert rules on its metrics (prometheus/events-stream-alerts.yml).
 */

const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip, { client: true });
let stream = 'W';
beforeEach(() => {
  stream = freshStream('W');
});

const env = (extra: Record<string, string> = {}) =>
  eventsEnv(t.db.url, nats.url, stream, { EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS: '1', EVENTS_RECONCILE_INTERVAL_SECONDS: '0', ...extra });
const config = (extra: Record<string, string> = {}) => loadConfig(env(extra));

/** The watch on a stream the relay created, and the worker's metrics fed by it. */
async function watching(extra: Record<string, string> = {}) {
  await ensureStream(nats.jsm, desiredStream(config(extra)), { role: 'relay' });
  const { logger, entries } = captureLogger('warn');
  const watch = startStreamWatch({ config: config(extra), db: t.db.db, logger });
  const metrics = createWorkerMetrics(new EventEmitter(), { stream: watch.events });
  const metric = async (line: RegExp) => (await metrics.registry.metrics()).split('\n').find((l) => line.test(l));
  return { watch, metrics, metric, entries };
}

describe.skipIf(skip)("the worker's watch over the stream's settings", () => {
  let w: { watch: StreamWatch; metrics: ReturnType<typeof createWorkerMetrics> } | undefined;
  const stop = async () => {
    w?.metrics.detach();
    await w?.watch.stop();
    w = undefined;
  };

  it('brings back max_msgs and the duplicate window set on the live stream within the interval, and counts each', async () => {
    const { metric, entries } = (w = await watching());
    try {
      const want = desiredStream(config());
      const { config: live } = await nats.jsm.streams.info(stream);
      await nats.jsm.streams.update(stream, { ...live, max_msgs: 20, duplicate_window: nanos(1000) });
      await waitFor(
        async () => {
          const c = (await nats.jsm.streams.info(stream)).config;
          return c.max_msgs === -1 && c.duplicate_window === want.duplicate_window;
        },
        3_000,
        'the settings brought back within the check interval (1 s)',
      );
      await waitFor(
        async () => metric(/^stayhub_events_stream_settings_changed_total\{field="max_msgs",fixed="true"\} 1$/),
        2_000,
        'counted',
      );
      expect(await metric(/^stayhub_events_stream_settings_changed_total\{field="duplicate_window",fixed="true"\}/)).toMatch(/ 1$/);
      expect(await metric(/^stayhub_events_stream_settings_unfixable /)).toBe('stayhub_events_stream_settings_unfixable 0');
      expect(entries().some((e) => e.level === 40 && /max_msgs: have 20, want -1/.test(String(e.changed)))).toBe(true);
    } finally {
      await stop();
    }
  });

  it('reports a sealed stream, which JetStream cannot unseal, as unfixable every round', async () => {
    const { metric, entries } = (w = await watching());
    try {
      const { config: live } = await nats.jsm.streams.info(stream);
      // Not in the client's update type: sealing is one-way, but the server takes it in an update.
      await nats.jsm.streams.update(stream, { ...live, sealed: true } as Parameters<typeof nats.jsm.streams.update>[1]);
      await waitFor(async () => metric(/^stayhub_events_stream_settings_unfixable [1-9]\d*$/), 3_000, 'the gauge');
      expect(await metric(/^stayhub_events_stream_settings_changed_total\{field="sealed",fixed="false"\}/)).toBeTruthy();
      expect(entries().some((e) => e.level === 50 && /sealed: have true, want false/.test(String(e.differences)))).toBe(true);
    } finally {
      await stop();
    }
  });

  it('leaves a longer max age alone, and reports it, unless EVENTS_ALLOW_SHORTER_MAX_AGE', async () => {
    const { watch } = (w = await watching());
    try {
      const { config: live } = await nats.jsm.streams.info(stream);
      const longer = live.max_age * 2;
      await nats.jsm.streams.update(stream, { ...live, max_age: longer });
      const found = await watch.checkSettings();
      expect(found).toEqual([expect.objectContaining({ field: 'max_age', fixedInPlace: false })]);
      expect((await nats.jsm.streams.info(stream)).config.max_age).toBe(longer);
    } finally {
      await stop();
    }
  });
});

describe.skipIf(skip)("the worker's scheduled reconcile", () => {
  it('publishes again an event deleted from the stream, past the duplicate window, and counts it', async () => {
    // A 1 s duplicate window (the retry span of one 1 s attempt) and a round every 2 s: each looks back 1 + 2 × 2 s.
    const extra = {
      MAX_ATTEMPTS: '1',
      LEASE_SECONDS: '1',
      EVENTS_DUPLICATE_WINDOW_SECONDS: '1',
      EVENTS_RECONCILE_INTERVAL_SECONDS: '2',
      EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS: '60',
    };
    const cfg = config(extra);
    await ensureStream(nats.jsm, desiredStream(cfg), { role: 'relay' });
    // Three events the relay stored (DONE, relay done), published as the relay publishes them.
    const { rows } = await t.db.db.execute<{ public_id: string; created_at: Date; payload: unknown }>(sql`
      insert into outbox (topic, key, payload, status, handlers_done, processed_at)
      select 'booking.created', 'k' || g, ${JSON.stringify(bookingPayload())}::jsonb, 'DONE', '{events.relay}', now()
        from generate_series(1, 3) g
      returning public_id::text, created_at, payload`);
    const publisher = createJetStreamPublisher(cfg, pino({ level: 'silent' }), { ownsStream: false });
    const seqs: number[] = [];
    try {
      for (const r of rows) {
        const relayed = payloadAsRelayed('booking.created', r.payload) as { payload: unknown };
        const { seq } = await relayMessage(publisher, cfg, {
          messageId: r.public_id,
          topic: 'booking.created',
          key: null,
          occurredAt: new Date(r.created_at),
          payload: relayed.payload,
        });
        seqs.push(seq);
      }
    } finally {
      await publisher.close();
    }
    await nats.jsm.streams.deleteMessage(stream, seqs[1]!);
    await sleep(1200); // past the duplicate window

    const { logger } = captureLogger('silent');
    const watch = startStreamWatch({ config: cfg, db: t.db.db, logger });
    const metrics = createWorkerMetrics(new EventEmitter(), { stream: watch.events });
    try {
      const text = () => metrics.registry.metrics();
      await waitFor(async () => /stayhub_events_stream_missing_total\{outcome="republished"\} 1\n/.test(await text()), 6_000, 'a round');
      expect((await readStream(nats.url, stream)).map((e) => e.msgId).sort()).toEqual(rows.map((r) => r.public_id).sort());
      expect(await text()).toMatch(/stayhub_events_stream_missing_total\{outcome="failed"\} 0\n/);
    } finally {
      metrics.detach();
      await watch.stop();
    }
  });
});

describe.skipIf(skip)('a worker whose EVENTS_MAX_AGE_SECONDS is shorter than the stream keeps', () => {
  it('is refused at start (exit 2, naming the setting); EVENTS_ALLOW_SHORTER_MAX_AGE=true lowers it', async () => {
    await ensureStream(nats.jsm, desiredStream(config({ EVENTS_MAX_AGE_SECONDS: '7200' })), { role: 'relay' });
    const err: string[] = [];
    const shorter = { EVENTS_MAX_AGE_SECONDS: '3600' };
    const code = await drainOutbox({ argv: ['--once'], env: env(shorter), out: () => {}, err: (l) => err.push(l) });
    expect(code).toBe(2);
    expect(err.join('\n')).toMatch(
      /max_age: have 7200 s, want 3600 s \(it would drop at once every event older than that; set EVENTS_ALLOW_SHORTER_MAX_AGE=true/,
    );
    expect((await nats.jsm.streams.info(stream)).config.max_age).toBe(7200e9);
    await expect(ensureStream(nats.jsm, desiredStream(config(shorter)), { role: 'relay' })).rejects.toThrow(StreamConfigError);

    const allowed = { ...shorter, EVENTS_ALLOW_SHORTER_MAX_AGE: 'true' };
    expect(await drainOutbox({ argv: ['--once'], env: env(allowed), out: () => {}, err: () => {} })).toBe(0);
    expect((await nats.jsm.streams.info(stream)).config.max_age).toBe(3600e9);
  });
});

describe('prometheus/events-stream-alerts.yml', () => {
  const dir = new URL('../../../prometheus/', import.meta.url);
  const file = parse(readFileSync(new URL('events-stream-alerts.yml', dir), 'utf8')) as {
    groups: { rules: { alert: string; expr: string; annotations: { runbook: string } }[] }[];
  };
  const rules = file.groups.flatMap((g) => g.rules);

  it("uses only the worker's metrics, each alert with a runbook heading; prometheus.yml loads it", async () => {
    const metrics = createWorkerMetrics(new EventEmitter());
    const families = new Set([...(await metrics.registry.metrics()).matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    metrics.detach();
    const operating = readFileSync(new URL('../../../docs/operating.md', import.meta.url), 'utf8');
    expect(rules.map((r) => r.alert)).toEqual([
      'EventsStreamMissingEvents',
      'EventsStreamSettingsChanged',
      'EventsStreamSettingsUnfixable',
    ]);
    for (const r of rules) {
      for (const [name] of r.expr.matchAll(/\bstayhub_[a-z_]+/g)) expect(families, `${r.alert} uses ${name}`).toContain(name);
      expect(r.annotations.runbook).toBe(`docs/operating.md#${r.alert.toLowerCase()}`);
      expect(operating).toContain(`#### ${r.alert}\n`);
    }
    const prom = parse(readFileSync(new URL('prometheus.yml', dir), 'utf8')) as { rule_files: string[] };
    expect(prom.rule_files).toContain('events-stream-alerts.yml');
  });

  it.skipIf(skipWithout('promtool', undefined, 'Debian: apt-get install -y prometheus'))('passes promtool check and its unit tests', () => {
    const promtool = (...args: string[]) => execFileSync('promtool', args, { cwd: dir, encoding: 'utf8', stdio: 'pipe' });
    expect(promtool('check', 'rules', 'events-stream-alerts.yml')).toMatch(/SUCCESS/);
    expect(promtool('test', 'rules', 'events-stream-alerts.test.yml')).toMatch(/SUCCESS/);
  });
});
