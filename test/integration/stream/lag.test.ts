import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import pino from 'pino';
import { loadConfig } from '../../../src/config.ts';
import { runGroup } from '../../../src/events/consumer.ts';
import { ensureGroup } from '../../../src/events/group.ts';
import { createConsumerMetrics } from '../../../src/events/lag.ts';
import { serveMetrics } from '../../../src/metrics/metrics-server.ts';
import { desiredStream, ensureStream } from '../../../src/events/stream.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { skipWithout } from '../../helpers/tools.ts';
import { waitFor } from '../../helpers/wait.ts';

/* Consumer lag as Prometheus metrics, and the alert rules that read them. */

const PROM = path.resolve(import.meta.dirname, '../../../prometheus');
const skip = skipWithoutNats();
const tdb = useTestDatabase('evlag');
const nats = useNats(skip, { client: true });

const metricValue = (text: string, name: string, group: string) => {
  const m = text.match(new RegExp(`^${name}\\{group="${group}"\\} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : undefined;
};

describe.skipIf(skip)('events consumer lag', () => {
  it("reports each group's pending count and the age of its oldest unacked event, back to 0 once caught up", async () => {
    const config = loadConfig({ DATABASE_URL: tdb.url, NATS_URL: nats.url, EVENTS_STREAM: 'LAG', EVENTS_SUBJECT_PREFIX: 'lag' });
    const jsm = await jetstreamManager(nats.nc);
    await ensureStream(jsm, desiredStream(config));
    const js = jetstream(nats.nc);
    for (let i = 0; i < 5; i++) {
      const h = headers();
      h.set('StayHub-Topic', 'test.thing');
      await js.publish('lag.test.thing', JSON.stringify({ i }), { msgID: `m-${i}`, headers: h });
    }
    const group = { stream: 'LAG', group: 'g1', filterSubject: 'lag.>', ackWaitSeconds: 5, maxDeliver: 3, batchSize: 10 };
    await ensureGroup(jsm, group);
    await ensureGroup(jsm, { ...group, group: 'g2' });
    await new Promise((r) => setTimeout(r, 1100));

    const metrics = createConsumerMetrics({ jsm, stream: 'LAG', db: tdb.db, group: 'g1' });
    const server = await serveMetrics(metrics.registry, 0, '127.0.0.1');
    const scrape = async () => (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text();
    try {
      let text = await scrape();
      expect(metricValue(text, 'stayhub_events_group_pending_messages', 'g1')).toBe(5);
      expect(metricValue(text, 'stayhub_events_group_pending_messages', 'g2')).toBe(5);
      expect(metricValue(text, 'stayhub_events_group_oldest_unacked_age_seconds', 'g1')).toBeGreaterThanOrEqual(1);
      expect(metricValue(text, 'stayhub_events_group_dead_letters', 'g1')).toBe(0);

      const runner = await runGroup({
        ...group,
        nc: nats.nc,
        db: tdb.db,
        log: pino({ level: 'silent' }),
        handle: async () => {},
        onOutcome: metrics.outcome,
      });
      try {
        await waitFor(
          async () => {
            const c = await jsm.consumers.info('LAG', 'g1');
            return c.num_ack_pending === 0 && c.num_pending === 0;
          },
          30_000,
          'g1 caught up',
        );
      } finally {
        await runner.stop();
      }
      text = await scrape();
      expect(metricValue(text, 'stayhub_events_group_pending_messages', 'g1')).toBe(0);
      expect(metricValue(text, 'stayhub_events_group_ack_pending_messages', 'g1')).toBe(0);
      expect(metricValue(text, 'stayhub_events_group_oldest_unacked_age_seconds', 'g1')).toBe(0);
      // The other group has not moved.
      expect(metricValue(text, 'stayhub_events_group_pending_messages', 'g2')).toBe(5);
      expect(text).toMatch(/^stayhub_events_consumer_outcomes_total\{group="g1",outcome="applied"\} 5$/m);
    } finally {
      await server.close();
    }
  });

  it('reports a group whose next event aged out of the stream, and keeps reporting its own once it has moved past the gap', async () => {
    const config = loadConfig({ DATABASE_URL: tdb.url, NATS_URL: nats.url, EVENTS_STREAM: 'AGE', EVENTS_SUBJECT_PREFIX: 'age' });
    const jsm = await jetstreamManager(nats.nc);
    await ensureStream(jsm, desiredStream(config));
    const js = jetstream(nats.nc);
    const publish = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const h = headers();
        h.set('StayHub-Topic', 'test.thing');
        await js.publish('age.test.thing', JSON.stringify({ i }), { headers: h });
      }
    };
    const group = { stream: 'AGE', group: 'own', filterSubject: 'age.>', ackWaitSeconds: 5, maxDeliver: 3, batchSize: 10 };
    await publish(5);
    await ensureGroup(jsm, group);
    await ensureGroup(jsm, { ...group, group: 'other' });
    // The first three go, as max age removes them: neither group had read them.
    await jsm.streams.purge('AGE', { seq: 4 });
    // A group made now starts at the stream's first event: it missed nothing it could have had.
    await ensureGroup(jsm, { ...group, group: 'late' });

    const metrics = createConsumerMetrics({ jsm, stream: 'AGE', db: tdb.db, group: 'own' });
    const server = await serveMetrics(metrics.registry, 0, '127.0.0.1');
    const scrape = async () => {
      const text = await (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text();
      return Object.fromEntries(['own', 'other', 'late'].map((g) => [g, metricValue(text, 'stayhub_events_group_events_aged_out', g)]));
    };
    try {
      expect(await scrape()).toEqual({ own: 1, other: 1, late: 0 });
      const runner = await runGroup({ ...group, nc: nats.nc, db: tdb.db, log: pino({ level: 'silent' }), handle: async () => {} });
      try {
        await waitFor(
          async () => {
            const c = await jsm.consumers.info('AGE', 'own');
            return c.num_pending === 0 && c.num_ack_pending === 0;
          },
          30_000,
          'own past the gap',
        );
      } finally {
        await runner.stop();
      }
      // The server's figures for `own` look normal again; what happened is still reported.
      expect((await jsm.consumers.info('AGE', 'own')).delivered.stream_seq).toBe(5);
      expect(await scrape()).toEqual({ own: 1, other: 1, late: 0 });
    } finally {
      await server.close();
    }
  });

  it('the alert rules use only metrics the consumer exports, and have runbook headings', async () => {
    const rules = (
      parse(readFileSync(path.join(PROM, 'events-alerts.yml'), 'utf8')) as {
        groups: { rules: { alert: string; expr: string; annotations: { runbook: string } }[] }[];
      }
    ).groups.flatMap((g) => g.rules);
    const metrics = createConsumerMetrics({ jsm: await jetstreamManager(nats.nc), stream: 'LAG', db: tdb.db, group: 'g1' });
    const families = new Set([...(await metrics.registry.metrics()).matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    const doc = readFileSync(path.resolve(PROM, '../docs/operating.md'), 'utf8');
    expect(rules.map((r) => r.alert)).toEqual([
      'EventsConsumerLagGrowing',
      'EventsConsumerDeadLetters',
      'EventsConsumerGroupMissing',
      'EventsConsumerEventsAgedOut',
    ]);
    for (const r of rules) {
      for (const [name] of r.expr.matchAll(/\bstayhub_[a-z_]+/g)) expect(families, `${r.alert} uses ${name}`).toContain(name);
      expect(r.annotations.runbook).toBe(`docs/operating.md#${r.alert.toLowerCase()}`);
      expect(doc).toContain(`#### ${r.alert}\n`);
    }
    const prom = parse(readFileSync(path.join(PROM, 'prometheus.yml'), 'utf8')) as { rule_files: string[] };
    expect(prom.rule_files).toContain('events-alerts.yml');
  });

  it.skipIf(skipWithout('promtool', undefined, 'Debian: apt-get install -y prometheus'))('passes promtool check and its unit tests', () => {
    const promtool = (...args: string[]) => execFileSync('promtool', args, { cwd: PROM, encoding: 'utf8', stdio: 'pipe' });
    expect(promtool('check', 'rules', 'events-alerts.yml')).toMatch(/SUCCESS/);
    expect(promtool('test', 'rules', 'events-alerts.test.yml')).toMatch(/SUCCESS/);
  });
});
