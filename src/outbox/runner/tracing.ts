import { ROOT_CONTEXT, SpanStatusCode, type Link } from '@opentelemetry/api';
import { inSpan, MESSAGING, placeAfterHop, SpanKind, storedSpanContext, tracer, tracingOn } from '../../telemetry/tracing.ts';
import type { ClaimedMessage } from '../claim.ts';
import type { Handler, HandlerContext } from './registry.ts';
import type { Verdict } from '../types.ts';

/*
 * The worker's spans. The claim, a span of its own linked to each message it claimed; each
 * message's handling, parented on the context its producer stored on the row (first attempt) or a
 * new trace linked to it (a retry: docs/adr/0031-retries-start-a-linked-trace.md); each handler a
 * child of that, and its effects (an email, a publish, a delivery row) children of the handler.
 * Tracing off: the callers skip all of it (tracingOn()), nothing is allocated.
 */

/** How the outbox names itself as a messaging system: not one the conventions list, so ours. */
const SYSTEM = 'stayhub_outbox';

/**
 * The claim, recorded once it returned messages (an empty poll, once a second per worker, is no
 * span): from `startTime` (epoch ms, when it was sent) to now, linked to each claimed message's
 * producer span (at most OTEL_SPAN_LINK_COUNT_LIMIT of them, 128 by default).
 */
export function recordClaim(startTime: number, batch: readonly ClaimedMessage[], limit: number): void {
  const links: Link[] = [];
  for (const m of batch) {
    const sc = storedSpanContext(m.traceparent, m.tracestate);
    if (sc) links.push({ context: sc, attributes: { [MESSAGING.messageId]: m.publicId } });
  }
  tracer()
    .startSpan(
      'receive outbox',
      {
        kind: SpanKind.CLIENT,
        startTime,
        links,
        attributes: {
          [MESSAGING.system]: SYSTEM,
          [MESSAGING.operationType]: 'receive',
          [MESSAGING.operationName]: 'claim',
          [MESSAGING.destination]: 'outbox',
          [MESSAGING.batchCount]: batch.length,
          'stayhub.outbox.claim_limit': limit,
        },
      },
      ROOT_CONTEXT,
    )
    .end();
}

/** Runs one message's handling (dispatch) in its span; the verdict becomes the span's status. */
export function handleInSpan(msg: ClaimedMessage, handle: () => Promise<Verdict | null>): Promise<Verdict | null> {
  const { parent, links } = placeAfterHop(msg, msg.attempts <= 1);
  return inSpan(
    `process ${msg.topic}`,
    {
      kind: SpanKind.CONSUMER,
      parent,
      links,
      attributes: {
        [MESSAGING.system]: SYSTEM,
        [MESSAGING.operationType]: 'process',
        [MESSAGING.destination]: msg.topic,
        [MESSAGING.messageId]: msg.publicId,
        'stayhub.outbox.attempt': msg.attempts,
        ...(msg.key !== null && { [MESSAGING.conversationId]: msg.key }),
        ...(msg.lane !== null && { 'stayhub.outbox.lane': msg.lane }),
      },
    },
    async (span) => {
      const verdict = await handle();
      span?.setAttribute('stayhub.outbox.verdict', verdict?.kind ?? 'claim_lost');
      if (verdict && (verdict.kind === 'retry' || verdict.kind === 'dead' || verdict.kind === 'postpone')) {
        span?.setStatus({ code: SpanStatusCode.ERROR, message: verdict.error.slice(0, 500) });
      }
      return verdict;
    },
  );
}

/** One handler's run, a child of the message's span; a failure is recorded on it (and thrown on to dispatch). */
export function runHandlerInSpan(handler: Handler, call: HandlerContext<never>): Promise<void> {
  return inSpan(handler.name, { attributes: { 'stayhub.outbox.handler': handler.name } }, () => handler.handle(call));
}

export { tracingOn };
