import type { JsMsg } from '@nats-io/jetstream';
import { HEADERS } from './subjects.ts';

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
  readonly code = 'events_malformed';
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
