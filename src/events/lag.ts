import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager } from '@nats-io/jetstream';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { Db } from '../db/client.ts';
import { countOpenDeadLetters } from './dead-letters.ts';
import type { EventOutcome } from './handle-event.ts';
import { groupMissedEvents, streamHoldings, type StreamHoldings } from './retention.ts';

export interface GroupLag {
  group: string;
  /** Events in the stream the group has not been given yet. */
  pending: number;
  /** Given to a process of the group, not acked yet. */
  ackPending: number;
  /** Age of the oldest event the group has not acked (0 when it is caught up), in seconds. */
  oldestUnackedAgeSeconds: number;
  /** Events the group had not read are gone from the stream (retention.ts: groupMissedEvents). */
  eventsAgedOut: boolean;
}

export interface StreamLag {
  /** Events the stream holds now (within EVENTS_MAX_AGE_SECONDS). */
  messages: number;
  /** Where the stream starts now, and whether it still holds every event it stored. */
  holdings: StreamHoldings;
  /** Every consumer group on the stream, by name. */
  groups: GroupLag[];
}

/**
 * Lag of every consumer group on the stream, read from the server: num_pending + num_ack_pending
 * say how far behind a group is; the oldest unacked event is the one after the group's ack floor,
 * whose timestamp says for how long; a group whose next event is older than the stream's first
 * has lost events. Any process can report every group: nothing here is local.
 * Throws JetStream's "stream not found" when the stream does not exist.
 */
export async function readStreamLag(jsm: JetStreamManager, stream: string): Promise<StreamLag> {
  const groups: GroupLag[] = [];
  const info = await jsm.streams.info(stream);
  const holdings = streamHoldings(info);
  for await (const c of jsm.consumers.list(stream)) {
    const behind = c.num_pending + c.num_ack_pending;
    let age = 0;
    if (behind > 0) {
      const seq = Math.max(c.ack_floor.stream_seq + 1, info.state.first_seq);
      const m = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
      if (m) age = Math.max(0, (Date.now() - m.time.getTime()) / 1000);
    }
    groups.push({
      group: c.name,
      pending: c.num_pending,
      ackPending: c.num_ack_pending,
      oldestUnackedAgeSeconds: age,
      eventsAgedOut: groupMissedEvents(c, holdings),
    });
  }
  groups.sort((a, b) => a.group.localeCompare(b.group));
  return { messages: info.state.messages, holdings, groups };
}

/** Every group's lag (readStreamLag without the stream's size): the consumer's Prometheus gauges. */
export async function readLag(jsm: JetStreamManager, stream: string): Promise<GroupLag[]> {
  return (await readStreamLag(jsm, stream)).groups;
}

export interface ConsumerMetrics {
  registry: Registry;
  /** A function, not a method: it is handed on as a callback. */
  outcome: (outcome: EventOutcome) => void;
  /** This process's group lost events (seen at start): reported until the process ends. */
  eventsAgedOut: () => void;
  /** The group's ledger was rebuilt from the bookings table after its stream or durable was deleted. */
  ledgerRebuilt: () => void;
  /** The ledger's audit counted `n` booking events the group never applied (earnings/audit.ts). */
  missedCounted: (n: number) => void;
}

/**
 * The consumer process's metrics. Gauges are read at scrape time (never stale):
 *   stayhub_events_group_present{group}                       1 while this process's group has its
 *                                                             durable consumer on the stream, else 0
 *   stayhub_events_group_pending_messages{group}              not yet delivered
 *   stayhub_events_group_ack_pending_messages{group}          delivered, not acked
 *   stayhub_events_group_oldest_unacked_age_seconds{group}    how long the oldest unacked event waits
 *   stayhub_events_group_dead_letters{group}                  open consumer dead letters (this process's group)
 *   stayhub_events_group_events_aged_out{group}               1 when events the group had not read
 *                                                             are gone from the stream; for this
 *                                                             process's group, from then until the
 *                                                             process ends
 *   stayhub_events_consumer_outcomes_total{group, outcome}    applied | duplicate | retry | dead
 *   stayhub_events_group_ledger_rebuilds_total{group}         rebuilds from the bookings table after
 *                                                             the group's stream or durable was deleted
 *   stayhub_events_group_missed_events_total{group}           booking events the stream skipped or lost
 *                                                             for the group, counted by the ledger's audit
 */
export function createConsumerMetrics(o: { jsm: JetStreamManager; stream: string; db: Db; group: string }): ConsumerMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const lag = sharedLagRead(o.jsm, o.stream);
  registerLagGauges(registry, o.group, lag);
  const agedOut = registerAgedOutGauge(registry, o.group, lag);
  new Gauge({
    name: 'stayhub_events_group_dead_letters',
    help: 'Consumer dead letters not replayed yet.',
    labelNames: GROUP_LABEL,
    registers: [registry],
    async collect() {
      this.set({ group: o.group }, await countOpenDeadLetters(o.db, o.group));
    },
  });
  const outcomes = new Counter({
    name: 'stayhub_events_consumer_outcomes_total',
    help: 'Events handled by this process: applied, duplicate (already in the inbox), retry, dead.',
    labelNames: ['group', 'outcome'] as const,
    registers: [registry],
  });
  const rebuilds = groupCounter(
    registry,
    o.group,
    'stayhub_events_group_ledger_rebuilds_total',
    "Rebuilds of the group's ledger from the bookings table after its stream or durable consumer was deleted.",
  );
  const missed = groupCounter(
    registry,
    o.group,
    'stayhub_events_group_missed_events_total',
    'Booking events the group never applied, found by the ledger audit and counted from the bookings table.',
  );
  return {
    registry,
    outcome: (outcome) => outcomes.inc({ group: o.group, outcome }),
    eventsAgedOut: agedOut.latch,
    ledgerRebuilt: () => rebuilds.inc(),
    missedCounted: (n) => missed.inc(n),
  };
}

const GROUP_LABEL = ['group'] as const;

/** A counter of this process's group, at 0 from the start (so a rate over it has a beginning). */
function groupCounter(registry: Registry, group: string, name: string, help: string) {
  const counter = new Counter({ name, help, labelNames: GROUP_LABEL, registers: [registry] });
  counter.inc({ group }, 0);
  return { inc: (n = 1) => counter.inc({ group }, n) };
}

/** Every group's lag, read once however many gauges of one scrape ask for it. */
function sharedLagRead(jsm: JetStreamManager, stream: string): () => Promise<GroupLag[]> {
  // prom-client collects the gauges of a scrape concurrently: they share one read of the server.
  let reading: Promise<GroupLag[]> | undefined;
  return () => {
    // No stream: no group, not a failed scrape (which would silence every alert on this job).
    reading ??= readLag(jsm, stream)
      .catch((err: unknown) => {
        if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return [];
        throw err;
      })
      .finally(() => (reading = undefined));
    return reading;
  };
}

/** The group's presence, and every group's pending, unacked and oldest unacked age. */
function registerLagGauges(registry: Registry, group: string, lag: () => Promise<GroupLag[]>): void {
  new Gauge({
    name: 'stayhub_events_group_present',
    help: "1 while this process's consumer group has its durable consumer on the stream; 0 when it or the stream is gone.",
    labelNames: GROUP_LABEL,
    registers: [registry],
    async collect() {
      this.set({ group }, (await lag()).some((l) => l.group === group) ? 1 : 0);
    },
  });
  const gauge = (name: string, help: string, pick: (l: GroupLag) => number) =>
    new Gauge({
      name,
      help,
      labelNames: GROUP_LABEL,
      registers: [registry],
      async collect() {
        const groups = await lag();
        this.reset();
        for (const l of groups) this.set({ group: l.group }, pick(l));
      },
    });
  gauge('stayhub_events_group_pending_messages', 'Events not yet delivered to the group.', (l) => l.pending);
  gauge('stayhub_events_group_ack_pending_messages', 'Events delivered to the group and not acked.', (l) => l.ackPending);
  gauge(
    'stayhub_events_group_oldest_unacked_age_seconds',
    'Age of the oldest event the group has not acked (0 when caught up).',
    (l) => Math.round(l.oldestUnackedAgeSeconds * 10) / 10,
  );
}

/** stayhub_events_group_events_aged_out; `latch` marks this process's group for good. */
function registerAgedOutGauge(registry: Registry, group: string, lag: () => Promise<GroupLag[]>): { latch: () => void } {
  // Latched for this process's group: once the group's position is past the gap, the server's
  // figures look as if nothing happened (it hands out the first event it still has), while what
  // the group builds stays short until someone rebuilds it, which restarts its processes.
  let ownAgedOut = false;
  new Gauge({
    name: 'stayhub_events_group_events_aged_out',
    help: "Events the group had not read are gone from the stream (1); for the reporting process's own group, from then until it ends.",
    labelNames: GROUP_LABEL,
    registers: [registry],
    async collect() {
      const groups = await lag();
      this.reset();
      for (const l of groups) {
        if (l.group === group && l.eventsAgedOut) ownAgedOut = true;
        this.set({ group: l.group }, l.eventsAgedOut || (l.group === group && ownAgedOut) ? 1 : 0);
      }
      if (ownAgedOut && !groups.some((l) => l.group === group)) this.set({ group }, 1);
    },
  });
  return {
    latch: () => {
      ownAgedOut = true;
    },
  };
}
