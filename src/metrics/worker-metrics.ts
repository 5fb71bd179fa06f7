import type { EventEmitter } from 'node:events';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { serveMetrics, type MetricsServer } from './metrics-server.ts';
import { registerPartitionsReattached } from './partition-metrics.ts';

/**
 * The worker's events as this module reads them (the contract is documented in
 * src/outbox/runner/outcomes.ts). Typed structurally, so metrics do not depend on the worker's internals.
 */
export interface WorkerOutcomeEvent {
  messageId: string;
  topic: string;
  handler: string | null;
  attempt: number;
  outcome: 'done' | 'retry' | 'postponed' | 'dead' | 'unknown_topic' | 'handed_back';
  durationMs: number;
}

export interface WorkerEventSource {
  on(event: 'claimed', listener: (e: { count: number }) => void): unknown;
  on(event: 'outcome', listener: (e: WorkerOutcomeEvent) => void): unknown;
  off(event: 'claimed', listener: (e: { count: number }) => void): unknown;
  off(event: 'outcome', listener: (e: WorkerOutcomeEvent) => void): unknown;
}

/** Who holds the webhook sender's slots, as this module reads it (src/webhooks/delivery/local-queue.ts SlotStats). */
export interface WebhookSlotsSnapshot {
  slots: number;
  inFlight: number;
  queued: number;
  ownersInFlight: number;
  ownersAtCap: number;
  ownersWaiting: number;
  topOwners: readonly number[];
  longestQueuedMs: number;
}

/** The webhook sender's attempts as this module reads them (src/webhooks/delivery/sender.ts). */
export interface WebhookAttemptSource {
  on(event: 'attempt', listener: (e: { endpointId: string; outcome: string; durationMs: number }) => void): unknown;
  on(event: 'started', listener: (e: { attempt: number; waitMs: number }) => void): unknown;
  off(event: 'attempt', listener: (e: { endpointId: string; outcome: string; durationMs: number }) => void): unknown;
  off(event: 'started', listener: (e: { attempt: number; waitMs: number }) => void): unknown;
  /** Who holds the slots now; absent from a source that only counts attempts. */
  slots?: () => WebhookSlotsSnapshot;
}

/** Owners whose slots are reported one by one, by rank (never by id: an owner label would grow with every host). */
const TOP_OWNER_RANKS = 5;

/** The worker's watch over the events stream as this module reads it (src/events/stream-watch.ts). */
export interface StreamWatchSource {
  on(event: 'settings', listener: (e: { differences: { field: string }[]; fixed: boolean }) => void): unknown;
  on(event: 'unfixable', listener: (n: number) => void): unknown;
  on(event: 'reconciled', listener: (c: { republished: number; inWindow: number; failed: number }) => void): unknown;
  off(event: 'settings', listener: (e: { differences: { field: string }[]; fixed: boolean }) => void): unknown;
  off(event: 'unfixable', listener: (n: number) => void): unknown;
  off(event: 'reconciled', listener: (c: { republished: number; inWindow: number; failed: number }) => void): unknown;
}

export interface WorkerMetrics {
  registry: Registry;
  /** Stops listening to the worker's events. */
  detach(): void;
}

/** Outcomes without a handler (unknown topic, handed back, dead before any handler ran) share this label. */
export const NO_HANDLER = 'none';

/**
 * Counters and histograms fed by the worker's events, in a registry of their own: the outbox
 * runner's, the webhook sender's and the events stream watch's (each series is present even
 * without its source, so a dashboard finds it).
 */
export function createWorkerMetrics(
  events: WorkerEventSource | EventEmitter,
  opts: { maxBatchSize?: number; webhooks?: WebhookAttemptSource; stream?: StreamWatchSource } = {},
): WorkerMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const detachers = [
    outboxMetrics(registry, events as WorkerEventSource, opts.maxBatchSize ?? 20),
    webhookMetrics(registry, opts.webhooks),
    streamMetrics(registry, opts.stream),
  ];
  return {
    registry,
    detach() {
      for (const detach of detachers) detach();
    },
  };
}

/**
 *   stayhub_worker_handler_outcomes_total{topic, handler, outcome}
 *       outcome: done (handled) | retry (failed, will back off) | dead (failed for good) |
 *                postponed (its downstream unavailable: waits, no attempt spent) |
 *                unknown_topic (no handler, left pending) | handed_back (returned at shutdown)
 *   stayhub_worker_handler_duration_seconds{topic, handler, outcome}   (histogram; handlers that ran)
 *   stayhub_worker_claim_batch_size                                    (histogram; non-empty claims)
 *   stayhub_outbox_partitions_reattached_total                         (half-detached days given back: ADR 0043)
 */
function outboxMetrics(registry: Registry, source: WorkerEventSource, maxBatchSize: number): () => void {
  const outcomes = new Counter({
    name: 'stayhub_worker_handler_outcomes_total',
    help: 'Handler outcomes by topic, handler and outcome (done, retry, postponed, dead, unknown_topic, handed_back).',
    labelNames: ['topic', 'handler', 'outcome'] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'stayhub_worker_handler_duration_seconds',
    help: 'How long handlers ran, by topic, handler and outcome.',
    labelNames: ['topic', 'handler', 'outcome'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  // Buckets up to the largest claim: claims that stay at the top say the worker is behind.
  const batchBuckets = [
    ...new Set([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000].filter((b) => b < maxBatchSize).concat(maxBatchSize)),
  ];
  registerPartitionsReattached(registry, 'housekeeping, or a write that missed its day');
  const batch = new Histogram({
    name: 'stayhub_worker_claim_batch_size',
    help: 'Messages per non-empty claim.',
    buckets: batchBuckets,
    registers: [registry],
  });

  const onClaimed = (e: { count: number }) => batch.observe(e.count);
  const childFor = boundChildren(outcomes, duration);
  const onOutcome = (e: WorkerOutcomeEvent) => {
    const b = childFor(e);
    b.count.inc();
    if (e.handler !== null) b.time.observe(e.durationMs / 1000);
  };
  source.on('claimed', onClaimed);
  source.on('outcome', onOutcome);
  return () => {
    source.off('claimed', onClaimed);
    source.off('outcome', onOutcome);
  };
}

type OutcomeLabel = 'topic' | 'handler' | 'outcome';

/**
 * The bound children per (topic, handler, outcome), looked up once: prom-client's own lookup
 * hashes a label object on every call, a cost per message that showed in the worker's profile.
 */
function boundChildren(outcomes: Counter<OutcomeLabel>, duration: Histogram<OutcomeLabel>) {
  type Bound = { count: ReturnType<typeof outcomes.labels>; time: ReturnType<typeof duration.labels> };
  const bound = new Map<string, Map<string | null, Map<string, Bound>>>();
  return (e: WorkerOutcomeEvent): Bound => {
    let byHandler = bound.get(e.topic);
    if (!byHandler) bound.set(e.topic, (byHandler = new Map<string | null, Map<string, Bound>>()));
    let byOutcome = byHandler.get(e.handler);
    if (!byOutcome) byHandler.set(e.handler, (byOutcome = new Map<string, Bound>()));
    let b = byOutcome.get(e.outcome);
    if (!b) {
      const labels = { topic: e.topic, handler: e.handler ?? NO_HANDLER, outcome: e.outcome };
      byOutcome.set(e.outcome, (b = { count: outcomes.labels(labels), time: duration.labels(labels) }));
    }
    return b;
  };
}

/**
 *   stayhub_webhook_attempts_total{outcome}
 *       outcome: succeeded | retry | failed (last attempt) | gone (410: endpoint disabled)
 *   stayhub_webhook_attempt_duration_seconds   (histogram)
 *   stayhub_webhook_first_attempt_delay_seconds   (histogram) due → started, for a delivery's first attempt
 * No endpoint label: one series per endpoint grew without bound with the endpoints hosts
 * register (a histogram is 15 series each). Which endpoints fail is the API's per-endpoint
 * gauges' job, for the endpoints worth watching (src/metrics/webhook-gauges.ts).
 *
 * Who holds the sender's slots, read at each scrape (docs/adr/0040-webhook-slots-fair-between-owners.md),
 * by counts and ranks, never by owner:
 *   stayhub_webhook_slots, stayhub_webhook_slots_in_use, stayhub_webhook_queued_deliveries
 *   stayhub_webhook_owner_slots_in_use{rank}   slots held by the owner holding the most (rank 1) … the fifth
 *   stayhub_webhook_owners_in_flight, stayhub_webhook_owners_at_cap (at WEBHOOK_HOST_CONCURRENCY)
 *   stayhub_webhook_owners_waiting   owners with a delivery queued and nothing in flight: none when the slots are shared well
 *   stayhub_webhook_longest_queued_seconds   how long the longest-waiting claimed delivery has been due
 */
function webhookMetrics(registry: Registry, webhooks: WebhookAttemptSource | undefined): () => void {
  const attempts = new Counter({
    name: 'stayhub_webhook_attempts_total',
    help: 'Webhook delivery attempts by outcome (succeeded, retry, failed, gone).',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const attemptDuration = new Histogram({
    name: 'stayhub_webhook_attempt_duration_seconds',
    help: 'How long each webhook attempt took (up to WEBHOOK_TIMEOUT_MS for one that never answers).',
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30],
    registers: [registry],
  });
  const firstDelay = new Histogram({
    name: 'stayhub_webhook_first_attempt_delay_seconds',
    help: "How long a webhook delivery's first attempt waited to start after it was due (claim and the sender's queue).",
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300],
    registers: [registry],
  });
  slotGauges(registry, webhooks?.slots);
  const onAttempt = (e: { outcome: string; durationMs: number }) => {
    attempts.inc({ outcome: e.outcome });
    attemptDuration.observe(e.durationMs / 1000);
  };
  const onStarted = (e: { attempt: number; waitMs: number }) => {
    if (e.attempt === 1) firstDelay.observe(e.waitMs / 1000);
  };
  webhooks?.on('attempt', onAttempt);
  webhooks?.on('started', onStarted);
  return () => {
    webhooks?.off('attempt', onAttempt);
    webhooks?.off('started', onStarted);
  };
}

/** The gauges of who holds the webhook sender's slots, read at each scrape (a snapshot costs a pass over the sender's queue). */
function slotGauges(registry: Registry, read: (() => WebhookSlotsSnapshot) | undefined): void {
  const gauge = (name: string, help: string, value: (s: WebhookSlotsSnapshot) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        const s = read?.();
        this.set(s ? value(s) : 0);
      },
    });
  gauge('stayhub_webhook_slots', 'Webhook sender slots (WEBHOOK_CONCURRENCY).', (s) => s.slots);
  gauge('stayhub_webhook_slots_in_use', 'Webhook attempts in their HTTP exchange now.', (s) => s.inFlight);
  gauge('stayhub_webhook_queued_deliveries', "Claimed webhook deliveries waiting in the sender's queue for a slot.", (s) => s.queued);
  gauge('stayhub_webhook_owners_in_flight', 'Owners (hosts) with a webhook attempt in flight.', (s) => s.ownersInFlight);
  gauge('stayhub_webhook_owners_at_cap', 'Owners (hosts) with WEBHOOK_HOST_CONCURRENCY attempts in flight.', (s) => s.ownersAtCap);
  gauge(
    'stayhub_webhook_owners_waiting',
    'Owners (hosts) with a claimed delivery waiting and no attempt in flight: waiting for a first slot.',
    (s) => s.ownersWaiting,
  );
  gauge(
    'stayhub_webhook_longest_queued_seconds',
    "How long the longest-waiting delivery in the sender's queue has been due.",
    (s) => s.longestQueuedMs / 1000,
  );
  new Gauge({
    name: 'stayhub_webhook_owner_slots_in_use',
    help: 'Webhook slots held by the owner (host) holding the most (rank 1), the second most, … down to the fifth.',
    labelNames: ['rank'] as const,
    registers: [registry],
    collect() {
      const top = read?.().topOwners ?? [];
      for (let rank = 1; rank <= TOP_OWNER_RANKS; rank++) this.set({ rank: String(rank) }, top[rank - 1] ?? 0);
    },
  });
}

/**
 *   stayhub_events_stream_missing_total{outcome}
 *       events the outbox relayed that the stream lacked, found by the worker's reconcile;
 *       outcome: republished | in_window (deleted inside the duplicate window: a later round) | failed
 *   stayhub_events_stream_settings_changed_total{field, fixed}
 *       settings of the live stream found different from the worker's; fixed: true (brought back) | false
 *   stayhub_events_stream_settings_unfixable   settings that cannot be brought back in place, at the last check
 */
function streamMetrics(registry: Registry, stream: StreamWatchSource | undefined): () => void {
  const missing = new Counter({
    name: 'stayhub_events_stream_missing_total',
    help: 'Events the outbox relayed that the stream lacked (reconcile), by outcome (republished, in_window, failed).',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const settingsChanged = new Counter({
    name: 'stayhub_events_stream_settings_changed_total',
    help: "Settings of the live events stream found different from the worker's, by field and whether they were brought back.",
    labelNames: ['field', 'fixed'] as const,
    registers: [registry],
  });
  const unfixable = new Gauge({
    name: 'stayhub_events_stream_settings_unfixable',
    help: 'Settings of the events stream that differ from the configuration and cannot be brought back in place, at the last check.',
    registers: [registry],
  });
  // Present from the start, so a rate or an increase sees the first event found missing.
  for (const outcome of ['republished', 'in_window', 'failed']) missing.inc({ outcome }, 0);
  const onSettings = (e: { differences: { field: string }[]; fixed: boolean }) => {
    for (const d of e.differences) settingsChanged.inc({ field: d.field, fixed: String(e.fixed) });
  };
  const onUnfixable = (n: number) => unfixable.set(n);
  const onReconciled = (c: { republished: number; inWindow: number; failed: number }) => {
    missing.inc({ outcome: 'republished' }, c.republished);
    missing.inc({ outcome: 'in_window' }, c.inWindow);
    missing.inc({ outcome: 'failed' }, c.failed);
  };
  stream?.on('settings', onSettings);
  stream?.on('unfixable', onUnfixable);
  stream?.on('reconciled', onReconciled);
  return () => {
    stream?.off('settings', onSettings);
    stream?.off('unfixable', onUnfixable);
    stream?.off('reconciled', onReconciled);
  };
}

/** The worker's metrics, served on `port`: what src/commands/drain-outbox.ts starts when WORKER_METRICS_PORT is set. */
export async function serveWorkerMetrics(
  events: WorkerEventSource | EventEmitter,
  opts: { port: number; host?: string; maxBatchSize?: number; webhooks?: WebhookAttemptSource; stream?: StreamWatchSource },
): Promise<MetricsServer> {
  const metrics = createWorkerMetrics(events, { maxBatchSize: opts.maxBatchSize, webhooks: opts.webhooks, stream: opts.stream });
  let server: MetricsServer;
  try {
    server = await serveMetrics(metrics.registry, opts.port, opts.host ?? '127.0.0.1');
  } catch (err) {
    metrics.detach();
    throw err;
  }
  return {
    port: server.port,
    async close() {
      metrics.detach();
      await server.close();
    },
  };
}
