import type { EventEmitter } from 'node:events';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import type { DoneBatcher } from '../../outbox/index.ts';
import {
  activeTraceId,
  inSpan,
  markActiveSpanFailed,
  MESSAGING,
  placeAfterHop,
  SpanKind,
  tracingOn,
  withoutPropagation,
} from '../../telemetry/tracing.ts';
import type { Network } from '../address-policy.ts';
import { signatureHeader } from '../secret.ts';
import type { ClaimedDelivery } from './claim.ts';
import type { ConnectionPool } from './connections.ts';
import { signedHeaders } from './exchanged-headers.ts';
import { recordAttempt, type Success } from './record.ts';
import { judge, type AttemptVerdict } from './schedule.ts';
import { sendOnce } from './send.ts';

/** One attempt's outcome, for metrics and tests. */
export interface AttemptEvent {
  endpointId: string;
  eventType: string;
  outcome: AttemptVerdict['kind'];
  status: number | null;
  durationMs: number;
}

/** An attempt taking its slot: how long its delivery had been due (claim and local queue), for metrics. */
export interface StartEvent {
  /** The attempt's number in its round: 1 is a delivery's first. */
  attempt: number;
  waitMs: number;
}

export interface WebhookSenderEvents {
  attempt: [AttemptEvent];
  started: [StartEvent];
}

export type AttemptConfig = Pick<
  Config,
  | 'WEBHOOK_RETRY_SCHEDULE_SECONDS'
  | 'WEBHOOK_TIMEOUT_MS'
  | 'WEBHOOK_CONNECT_TIMEOUT_MS'
  | 'WEBHOOK_DISABLE_AFTER_HOURS'
  | 'WEBHOOK_ALLOW_PRIVATE_NETWORKS'
  | 'WEBHOOK_EXTRA_PORTS'
  | 'WEBHOOK_ATTEMPTS_KEPT'
  | 'WEBHOOK_TRACE_CONTEXT'
>;

export interface AttemptDeps {
  db: Db;
  config: AttemptConfig;
  log: Logger;
  events: EventEmitter<WebhookSenderEvents>;
  /** Successes are recorded together (record.ts recordSuccesses). */
  successes: DoneBatcher<Success>;
  /** Aborted on a forced stop: attempts in flight end, unrecorded, and their leases bring them back. */
  signal: AbortSignal;
  connections: ConnectionPool | undefined;
  network?: Network;
}

/** What the sender must know of an attempt once it is recorded: set when it disabled its endpoint. */
export interface AttemptDone {
  disabled?: string;
}

const USER_AGENT = 'StayHub-Webhooks/1.0';

/**
 * One attempt in its span (tracing on): the first attempt of a round continues the trace of the
 * fan-out that made the delivery, a later one is a new trace linked to it (the schedule spaces
 * them up to 10 hours: docs/adr/0031-retries-start-a-linked-trace.md). The HTTP client span
 * below it carries `traceparent` to the host, unless WEBHOOK_TRACE_CONTEXT is off.
 * `release`: frees the attempt's slot, once its exchange is over.
 */
export function tracedAttempt(deps: AttemptDeps, d: ClaimedDelivery, release: () => void): Promise<AttemptDone> {
  if (!tracingOn()) return attempt(deps, d, release);
  return inSpan(
    `send webhook ${d.eventType}`,
    {
      kind: SpanKind.PRODUCER,
      ...placeAfterHop(d, d.attempt <= 1),
      attributes: {
        [MESSAGING.system]: 'webhook',
        [MESSAGING.operationType]: 'send',
        [MESSAGING.destination]: d.endpointPublicId,
        [MESSAGING.messageId]: d.publicId,
        'stayhub.webhook.attempt': d.attempt,
      },
    },
    () => attempt(deps, d, release),
  );
}

/** POST (send.ts) → judge (schedule.ts) → record (record.ts), then a log line and an event. */
async function attempt(deps: AttemptDeps, d: ClaimedDelivery, release: () => void): Promise<AttemptDone> {
  const { config } = deps;
  const timestamp = Math.floor(Date.now() / 1000);
  const send = config.WEBHOOK_TRACE_CONTEXT ? sendOnce : (o: Parameters<typeof sendOnce>[0]) => withoutPropagation(() => sendOnce(o));
  const headers = {
    'user-agent': USER_AGENT,
    'webhook-id': d.publicId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signatureHeader(d.secrets, d.publicId, timestamp, d.body),
  };
  const sent = await send({
    url: d.url,
    body: d.body,
    headers,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    connectTimeoutMs: config.WEBHOOK_CONNECT_TIMEOUT_MS,
    allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
    extraPorts: config.WEBHOOK_EXTRA_PORTS,
    signal: deps.signal,
    connections: deps.connections,
    network: deps.network,
  });
  if (deps.signal.aborted) return {}; // forced stop: the lease brings it back
  // Kept beside the attempt: the host sees what the receiver verified (the signature is no secret).
  const result = { ...sent, requestHeaders: signedHeaders(headers) };
  const verdict = judge(result, d.attempt, config.WEBHOOK_RETRY_SCHEDULE_SECONDS);
  if (verdict.kind !== 'succeeded') markActiveSpanFailed(result.error ?? `answered ${result.status}`);
  // A success frees its slot now; a failure holds it until recorded, since recording it may
  // disable the endpoint (410, or failing too long), and no next attempt may go out before.
  if (verdict.kind === 'succeeded') release();
  const recorded =
    verdict.kind === 'succeeded'
      ? { settled: await deps.successes.add({ d, result, traceId: activeTraceId() }), disabled: undefined }
      : await recordAttempt(deps.db, d, result, verdict, {
          disableAfterHours: config.WEBHOOK_DISABLE_AFTER_HOURS,
          attemptsKept: config.WEBHOOK_ATTEMPTS_KEPT,
        });
  const line = {
    delivery: d.publicId,
    endpoint: d.endpointPublicId,
    type: d.eventType,
    attempt: d.attempt,
    status: result.status,
    ms: result.durationMs,
    outcome: verdict.kind,
  };
  if (verdict.kind === 'succeeded') deps.log.debug(line, 'webhook delivered');
  else
    deps.log.warn(
      { ...line, error: result.error, retryInSeconds: verdict.kind === 'retry' ? Math.round(verdict.delaySeconds) : undefined },
      'webhook attempt failed',
    );
  if (recorded.disabled) deps.log.warn({ endpoint: d.endpointPublicId, reason: recorded.disabled }, 'webhook endpoint disabled');
  deps.events.emit('attempt', {
    endpointId: d.endpointPublicId,
    eventType: d.eventType,
    outcome: verdict.kind,
    status: result.status,
    durationMs: result.durationMs,
  });
  return { disabled: recorded.disabled };
}
