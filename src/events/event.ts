import type { JsMsg } from '@nats-io/jetstream';
import { HEADERS, SCHEMA_VERSIONS } from './subjects.ts';

/** An event as a consumer sees it: the relay's headers decoded, the body parsed. */
export interface ConsumedEvent {
  /** Nats-Msg-Id = the outbox message's public id: the identity to deduplicate on. */
  messageId: string;
  subject: string;
  topic: string;
  key: string | null;
  occurredAt: Date | null;
  schemaVersion: number | null;
  streamSeq: number | null;
  /** 1 on the first delivery. */
  deliveries: number;
  headers: Record<string, string>;
  body: unknown;
}

export class MalformedEventError extends Error {
  readonly code: string = 'events_malformed';
}

/**
 * An event in a schema version this consumer was not written for: a newer producer, or a header
 * that is not a version at all. Reading it as the version we know could count a field whose
 * meaning changed, so it is refused (dead-lettered with this message) until the consumer is
 * upgraded and the dead letter replayed.
 */
export class UnknownSchemaVersionError extends MalformedEventError {
  override readonly code = 'events_unknown_schema_version';
  override name = 'UnknownSchemaVersionError';
}

/**
 * Throws UnknownSchemaVersionError unless this code knows the event's schema version: 1 up to the
 * topic's current SCHEMA_VERSIONS entry (1 for a topic it does not publish). An event without the
 * header is read as version 1: the relay has always set it, and events written by hand in tools
 * and tests often leave it out.
 */
export function assertKnownSchemaVersion(e: ConsumedEvent): void {
  const raw = e.headers[HEADERS.schemaVersion];
  if (raw === undefined) return;
  const newest = (SCHEMA_VERSIONS as Record<string, number>)[e.topic] ?? 1;
  const version = /^\d+$/.test(raw.trim()) ? Number(raw) : NaN;
  if (!(version >= 1 && version <= newest)) {
    throw new UnknownSchemaVersionError(
      `event ${e.messageId} (${e.topic}) has ${HEADERS.schemaVersion} ${JSON.stringify(raw)}; this consumer reads ` +
        `version${newest > 1 ? `s 1 to ${newest}` : ' 1'} of it: upgrade the consumer, then replay its dead letters`,
    );
  }
}

function headersOf(m: JsMsg): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of m.headers ?? []) if (v[0] !== undefined) out[k] = v[0];
  return out;
}

export function decodeEvent(m: JsMsg): ConsumedEvent {
  const headers = headersOf(m);
  return fromParts({ subject: m.subject, headers, data: m.string(), streamSeq: m.seq, deliveries: m.info.deliveryCount });
}

/** Also used to rebuild an event from a stored dead letter. `data`: a message's JSON text, or a dead letter's body already parsed. */
export function fromParts(p: {
  subject: string;
  headers: Record<string, string>;
  data: unknown;
  streamSeq: number | null;
  deliveries: number;
}): ConsumedEvent {
  const messageId = p.headers[HEADERS.msgId] ?? p.headers[HEADERS.outboxId];
  if (!messageId) throw new MalformedEventError(`event at ${p.subject} has no ${HEADERS.msgId} header: cannot deduplicate it`);
  let body = p.data;
  if (typeof p.data === 'string') {
    try {
      body = JSON.parse(p.data);
    } catch {
      throw new MalformedEventError(`event ${messageId} has a body that is not JSON`);
    }
  }
  const occurred = p.headers[HEADERS.occurredAt];
  const version = p.headers[HEADERS.schemaVersion];
  return {
    messageId,
    subject: p.subject,
    topic: p.headers[HEADERS.topic] ?? p.subject,
    key: p.headers[HEADERS.key] ?? null,
    occurredAt: occurred ? new Date(occurred) : null,
    schemaVersion: version ? Number(version) : null,
    streamSeq: p.streamSeq,
    deliveries: p.deliveries,
    headers: p.headers,
    body,
  };
}
