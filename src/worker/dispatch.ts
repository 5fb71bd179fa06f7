import type { EventEmitter } from 'node:events';
import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import { retryDelaySeconds, type BackoffOptions } from '../outbox/backoff.ts';
import type { ClaimedMessage } from '../outbox/claim.ts';
import * as settle from '../outbox/settle.ts';
import { TOPICS, isTopicName } from '../outbox/topics.ts';
import { describeFailure, isPermanent, redactEmails } from './errors.ts';
import type { Handler, HandlerRegistry } from './registry.ts';
import type { OutcomeEvent, WorkerEvents } from './loop.ts';

export interface DispatchContext {
  db: Db;
  registry: HandlerRegistry;
  log: Logger;
  events: EventEmitter<WorkerEvents>;
  signal: AbortSignal;
  maxAttempts: number;
  backoff: BackoffOptions;
  unknownTopicRecheckSeconds: number;
  /** Marks a message DONE (fenced); the loop batches these writes (settle.ts DoneBatcher). */
  markDone(id: number, claimId: string, lastHandler?: string): Promise<boolean>;
  /** Called when a topic has no handler; the loop decides whether to warn (not on every poll). */
  onUnknownTopic(topic: string): void;
}

/** What happened to the message as a whole. 'lost' = our claim was superseded (lease ran out). */
export type MessageOutcome = 'done' | 'retry' | 'dead' | 'unknown_topic' | 'lost';

/**
 * Settles are single UPDATEs; if the database is briefly unreachable, try a few times. If it stays
 * unreachable the outcome is not recorded, the lease runs out and the message is delivered again:
 * at-least-once, never lost.
 */
async function persist(log: Logger, what: string, op: () => Promise<boolean>): Promise<boolean> {
  for (let i = 0; ; i++) {
    try {
      return await op();
    } catch (err) {
      if (i >= 4) {
        log.error({ err: { message: (err as Error).message } }, `could not record ${what}; the lease will bring the message back`);
        return false;
      }
      await new Promise((r) => setTimeout(r, 200 * 2 ** i));
    }
  }
}

function emit(ctx: DispatchContext, event: OutcomeEvent) {
  const level = event.outcome === 'done' ? 'info' : event.outcome === 'dead' ? 'error' : event.outcome === 'retry' ? 'warn' : 'info';
  ctx.log[level](event, 'outbox handler outcome');
  try {
    ctx.events.emit('outcome', event);
  } catch (err) {
    ctx.log.error({ err }, 'an outcome listener threw');
  }
}

/**
 * Runs one claimed message through its handlers and records the outcome, every write fenced on
 * this claim. No transaction is open while a handler runs.
 *
 * Handlers of one message run one after the other, each one's success recorded the moment it
 * finishes. All pending handlers run even when one fails (the guest's email should not wait for
 * the host's mail server); then the message is DONE if all succeeded, DEAD if every failure was
 * permanent or this was the last attempt, otherwise it backs off and only the failed handlers run
 * next time. (Every, not any: a 550 for the guest must not stop the retry of the host's 451 —
 * found by the chaos run, where it lost host emails.)
 */
export async function dispatch(ctx: DispatchContext, msg: ClaimedMessage): Promise<MessageOutcome> {
  const started = performance.now();
  const base = { messageId: msg.publicId, topic: msg.topic, attempt: msg.attempts };
  const log = ctx.log.child({ messageId: msg.publicId, topic: msg.topic, attempt: msg.attempts });
  const ms = () => Math.round(performance.now() - started);

  const handlers = ctx.registry.handlersFor(msg.topic);
  if (handlers.length === 0) {
    ctx.onUnknownTopic(msg.topic);
    const held = await persist(log, 'unknown-topic release', () =>
      settle.releaseUnknownTopic(ctx.db, msg.id, msg.claimId, ctx.unknownTopicRecheckSeconds),
    );
    if (!held) return 'lost';
    emit(ctx, { ...base, handler: null, outcome: 'unknown_topic', durationMs: ms() });
    return 'unknown_topic';
  }

  const dead = async (handler: string | null, error: string): Promise<MessageOutcome> => {
    const held = await persist(log, 'dead letter', () => settle.markDead(ctx.db, msg.id, msg.claimId, error));
    if (!held) return 'lost';
    emit(ctx, { ...base, handler, outcome: 'dead', durationMs: ms(), error });
    return 'dead';
  };

  // Attempts are counted at claim. More claims than MAX_ATTEMPTS means earlier claims ended without
  // an outcome (the worker died, every time): stop feeding this message to workers.
  if (msg.attempts > ctx.maxAttempts) {
    return dead(null, `worker: LeaseExpired: claimed ${msg.attempts - 1} times without an outcome (did the worker crash each time?)`);
  }

  let payload: unknown = msg.payload;
  if (isTopicName(msg.topic)) {
    const parsed = TOPICS[msg.topic].safeParse(msg.payload);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'} ${i.message}`).join('; ');
      return dead(null, redactEmails(`payload: ZodError: does not match the ${msg.topic} schema: ${issues}`).slice(0, 2000));
    }
    payload = parsed.data;
  }

  const failures: { handler: Handler; error: unknown; durationMs: number }[] = [];
  const pending = handlers.filter((h) => !msg.handlersDone.includes(h.name));
  for (const [i, handler] of pending.entries()) {
    const t0 = performance.now();
    try {
      await handler.handle({
        messageId: msg.publicId,
        topic: msg.topic as never,
        key: msg.key,
        attempt: msg.attempts,
        payload: payload as never,
        log: log.child({ handler: handler.name }),
        signal: ctx.signal,
      });
    } catch (error) {
      failures.push({ handler, error, durationMs: Math.round(performance.now() - t0) });
      continue;
    }
    const durationMs = Math.round(performance.now() - t0);
    // The last handler, all others fine: record it and DONE in one write.
    const last = i === pending.length - 1 && failures.length === 0;
    const held = await persist(log, last ? 'done' : 'handler success', () =>
      last
        ? ctx.markDone(msg.id, msg.claimId, handler.name)
        : settle.recordHandlerDone(ctx.db, msg.id, msg.claimId, handler.name),
    );
    if (!held) {
      log.warn({ handler: handler.name }, 'claim superseded (lease expired); leaving the message to its new claim');
      return 'lost';
    }
    emit(ctx, { ...base, handler: handler.name, outcome: 'done', durationMs });
    if (last) return 'done';
  }

  if (failures.length === 0) {
    // Every handler had already succeeded on an earlier attempt.
    return (await persist(log, 'done', () => ctx.markDone(msg.id, msg.claimId))) ? 'done' : 'lost';
  }

  const lastError = failures.map((f) => describeFailure(f.handler.name, f.error)).join(' | ').slice(0, 4000);
  const permanent = failures.every((f) => isPermanent(f.error));
  const outcome = permanent || msg.attempts >= ctx.maxAttempts ? 'dead' : 'retry';
  const held =
    outcome === 'dead'
      ? await persist(log, 'dead letter', () => settle.markDead(ctx.db, msg.id, msg.claimId, lastError))
      : await persist(log, 'retry', () =>
          settle.scheduleRetry(ctx.db, msg.id, msg.claimId, retryDelaySeconds(msg.attempts, ctx.backoff), lastError),
        );
  if (!held) return 'lost';
  for (const f of failures) {
    emit(ctx, {
      ...base,
      handler: f.handler.name,
      outcome,
      durationMs: f.durationMs,
      error: describeFailure(f.handler.name, f.error),
    });
  }
  return outcome;
}
