import { Gauge, type Registry } from 'prom-client';
import type { Db } from '../db/client.ts';
import { poolOf } from '../db/prepared.ts';
import { registerPartitionsReattached } from './partition-metrics.ts';
import {
  listPendingDetaches,
  outboxStats,
  partitionsAheadSeconds,
  walSlotState,
  type HandlerCatalogue,
  type OutboxStats,
  type WalSlotState,
} from '../outbox/index.ts';

/** One read: the stats, how far ahead the outbox's day partitions reach, and the WAL slot's state (OUTBOX_WRITES=wal). */
type Reading = OutboxStats & { partitionsAheadSeconds: number; detachPending: number; wal?: WalSlotState | null };

export interface OutboxGaugeOptions {
  db: Db;
  catalogue: HandlerCatalogue;
  /** How long one database read serves scrapes (default 5 s): several Prometheus servers or a fast interval still cost one query per period. */
  cacheMs?: number;
  now?: () => number;
  /** Told when a read fails (the scrape still succeeds, with stats_up 0). */
  onError?: (err: unknown) => void;
  /** OUTBOX_WRITES=wal: the replication slot whose messages are not rows yet. */
  walSlot?: string;
}

/** One read of the database's numbers, shared by the scrapes of `cacheMs` (and by those in flight). */
function cachedReading(opts: OutboxGaugeOptions): () => Promise<Reading | null> {
  const cacheMs = opts.cacheMs ?? 5_000;
  const now = opts.now ?? Date.now;
  let cached: { at: number; value: Promise<Reading | null> } | undefined;
  return (): Promise<Reading | null> => {
    if (cached && now() - cached.at < cacheMs) return cached.value;
    const value = Promise.all([
      outboxStats(opts.db),
      partitionsAheadSeconds(poolOf(opts.db)),
      listPendingDetaches(poolOf(opts.db)),
      opts.walSlot === undefined ? undefined : walSlotState(opts.db, opts.walSlot),
    ])
      .then(([stats, ahead, pending, wal]): Reading => ({ ...stats, partitionsAheadSeconds: ahead, detachPending: pending.length, wal }))
      .catch((err: unknown) => {
        opts.onError?.(err);
        return null;
      });
    cached = { at: now(), value };
    return value;
  };
}

/**
 * The outbox's numbers as gauges, read from the database when Prometheus scrapes, never per
 * request. One `outboxStats` query feeds every gauge; its result is kept `cacheMs`, and
 * concurrent scrapes share the query in flight.
 *
 * Every handled topic always has a series (0 when empty), so an alert compares numbers instead of
 * reasoning about absent series. If the database cannot be read, the outbox gauges are left empty
 * for that scrape and `stayhub_outbox_stats_up` is 0: a stale number would look healthy.
 */
export function registerOutboxGauges(registry: Registry, opts: OutboxGaugeOptions): void {
  const read = cachedReading(opts);

  // prom-client starts every metric's collect() at once on a scrape and serialises each metric
  // after its own collect resolves. All these gauges await the same promise, which applies one
  // read to all of them synchronously, so a scrape never mixes two snapshots; within the cache
  // period nothing is re-applied.
  let applied: Promise<Reading | null> | undefined;
  let applying: Promise<void> = Promise.resolve();
  function collect(): Promise<void> {
    const value = read();
    if (value !== applied) {
      applied = value;
      applying = value.then(apply);
    }
    return applying;
  }

  const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new Gauge<L>({ name, help, labelNames, registers: [registry], collect });

  const messages = gauge(
    'stayhub_outbox_messages',
    'Outbox messages by status and topic. pending includes leased and backing-off messages; dead ones stay until replayed.',
    ['status', 'topic'],
  );
  const leased = gauge(
    'stayhub_outbox_leased_messages',
    'PENDING messages a worker holds right now (claimed, lease not run out), by topic.',
    ['topic'],
  );
  const doneLastHour = gauge('stayhub_outbox_done_last_hour', 'Messages that became DONE in the last hour, by topic.', ['topic']);
  const oldestAge = gauge(
    'stayhub_outbox_oldest_pending_age_seconds',
    'Age (since creation) of the oldest PENDING message, by topic; 0 when none is pending.',
    ['topic'],
  );
  const unknownTopic = gauge(
    'stayhub_outbox_unknown_topic_messages',
    'PENDING messages whose topic has no handler in the worker (left pending, never dead-lettered), by topic.',
    ['topic'],
  );
  const partitionsAhead = gauge(
    'stayhub_outbox_partitions_ahead_seconds',
    "Seconds until the end of the outbox's last day partition. Below 0 no message can be written (bookings fail); the worker keeps it about a week.",
    [],
  );
  const detachPending = gauge(
    'stayhub_outbox_partitions_detach_pending',
    "Day partitions of the outbox an interrupted DETACH … CONCURRENTLY left marked: their messages out of sight, their day's writes refused until given back.",
    [],
  );
  const wal = walGauges(gauge);
  registerPartitionsReattached(registry, 'on a write that missed its day');
  const up = gauge('stayhub_outbox_stats_up', '1 if the last outbox stats read succeeded, 0 if the database could not be read.', []);

  function apply(s: Reading | null) {
    for (const g of [messages, leased, doneLastHour, oldestAge, unknownTopic, partitionsAhead, detachPending]) g.reset();
    up.set(s ? 1 : 0);
    wal.apply(s?.wal);
    if (!s) return;
    partitionsAhead.set(s.partitionsAheadSeconds);
    detachPending.set(s.detachPending);
    const byTopic = new Map(s.byTopic.map((t) => [t.topic, t] as const));
    for (const topic of new Set([...opts.catalogue.topics(), ...byTopic.keys()])) {
      const t = byTopic.get(topic);
      messages.set({ status: 'pending', topic }, t?.pending ?? 0);
      messages.set({ status: 'dead', topic }, t?.dead ?? 0);
      leased.set({ topic }, t?.leased ?? 0);
      doneLastHour.set({ topic }, t?.doneLastHour ?? 0);
      oldestAge.set({ topic }, t?.oldestPendingAgeSeconds ?? 0);
      if (t && t.pending > 0 && !opts.catalogue.isHandled(topic)) unknownTopic.set({ topic }, t.pending);
    }
  }
}

/** OUTBOX_WRITES=wal: how far behind the outbox's replication slot is, and whether it is there at all. */
function walGauges(gauge: (name: string, help: string, labelNames: readonly never[]) => Gauge<never>) {
  const behind = gauge(
    'stayhub_outbox_wal_behind_bytes',
    "OUTBOX_WRITES=wal: bytes of WAL the worker has not read from the outbox's replication slot: messages not yet rows, held in pg_wal. 0 with OUTBOX_WRITES=table, or without a slot.",
    [],
  );
  const missing = gauge(
    'stayhub_outbox_wal_slot_missing',
    "OUTBOX_WRITES=wal: 1 when the outbox's replication slot is missing or has lost WAL it needed (messages are being lost), else 0; always 0 with OUTBOX_WRITES=table.",
    [],
  );
  return {
    /** `state`: undefined when not read (table mode, or the read failed), null when the slot is missing. */
    apply(state: WalSlotState | null | undefined) {
      behind.reset();
      missing.reset();
      if (state === undefined) return;
      missing.set(state === null || state.walStatus === 'lost' ? 1 : 0);
      if (state) behind.set(state.behindBytes);
    },
  };
}
