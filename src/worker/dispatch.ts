import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import type { BackoffOptions } from '../outbox/backoff.ts';
import type { ClaimedMessage } from '../outbox/claim.ts';
import { recordHandlerDone } from '../outbox/settle.ts';
import { TOPICS, isTopicName } from '../outbox/topics.ts';
import { redactEmails } from './errors.ts';
import type { OutcomeReporter } from './events.ts';
import { persist } from './settler.ts';
import type { Handler, HandlerContext, HandlerRegistry } from './registry.ts';
import { verdictAfterRun, verdictBeforeRun, DONE, type HandlerFailure, type Verdict } from './verdict.ts';

export interface DispatchContext {
  db: Db;
  registry: HandlerRegistry;
  log: Logger;
  reporter: OutcomeReporter;
  signal: AbortSignal;
  maxAttempts: number;
  backoff: BackoffOptions;
  /** Called when a topic has no handler; the loop decides whether to warn (not on every poll). */
  onUnknownTopic(topic: string): void;
  /**
   * Receives every dispatched message with its verdict (null: our claim was lost, nothing more to
   * record). Called exactly once per message: this is how a message leaves dispatch.
   */
  settle(msg: ClaimedMessage, verdict: Verdict | null): void;
}

/**
 * What a handler is given. A class, so a call costs one small object and no closure; the child
 * logger bound to { messageId, topic, attempt, handler } is built only if the handler asks for it.
 */
class HandlerCall implements HandlerContext<never> {
  private childLog: Logger | undefined;

  constructor(
    private readonly msg: ClaimedMessage,
    readonly payload: never,
    private readonly handler: string,
    private readonly parentLog: Logger,
    readonly signal: AbortSignal,
  ) {}

  get messageId() {
    return this.msg.publicId;
  }
  get topic() {
    return this.msg.topic as never;
  }
  get key() {
    return this.msg.key;
  }
  get attempt() {
    return this.msg.attempts;
  }
  get occurredAt() {
    return new Date(this.msg.createdAtMs);
  }
  get log(): Logger {
    return (this.childLog ??= this.parentLog.child({
      messageId: this.msg.publicId,
      topic: this.msg.topic,
      attempt: this.msg.attempts,
      handler: this.handler,
    }));
  }
}

function describeIssues(topic: string, issues: { path: PropertyKey[]; message: string }[]): string {
  const text = issues.map((i) => `${i.path.join('.') || '(root)'} ${i.message}`).join('; ');
  return redactEmails(`payload: ZodError: does not match the ${topic} schema: ${text}`).slice(0, 2000);
}

/**
 * Runs one claimed message through its handlers, then hands it with its verdict to
 * `ctx.settle` (src/worker/settler.ts records it). No transaction is open while a handler runs.
 *
 * Handlers of one message run one after the other. A success followed by another handler is
 * recorded the moment it finishes (if the worker dies before the next one, the redelivery does not
 * repeat it); the success that completes the message is recorded with DONE, in the same write.
 * The rules (done / retry at T / dead) are src/worker/verdict.ts.
 */
export async function dispatch(ctx: DispatchContext, msg: ClaimedMessage): Promise<void> {
  let verdict: Verdict | null;
  try {
    verdict = await run(ctx, msg);
  } catch (err) {
    // run() records handler failures itself; reaching here is a bug. The lease brings the message back.
    ctx.log.error({ err, messageId: msg.publicId }, 'dispatch failed unexpectedly');
    verdict = null;
  }
  ctx.settle(msg, verdict);
}

async function run(ctx: DispatchContext, msg: ClaimedMessage): Promise<Verdict | null> {
  const handlers = ctx.registry.handlersFor(msg.topic);
  if (handlers.length === 0) ctx.onUnknownTopic(msg.topic);
  // Topics of the API↔worker contract have a payload schema; others (tests, bench) do not.
  let payload = msg.payload;
  let invalid: string | null = null;
  if (handlers.length > 0 && msg.attempts <= ctx.maxAttempts && isTopicName(msg.topic)) {
    const parsed = TOPICS[msg.topic].safeParse(msg.payload);
    if (parsed.success) payload = parsed.data;
    else invalid = describeIssues(msg.topic, parsed.error.issues);
  }
  const early = verdictBeforeRun({
    handlerCount: handlers.length,
    attempts: msg.attempts,
    maxAttempts: ctx.maxAttempts,
    payloadError: invalid,
  });
  if (early) return early;

  const pending: readonly Handler[] =
    msg.handlersDone.length === 0 ? handlers : handlers.filter((h) => !msg.handlersDone.includes(h.name));
  let failures: HandlerFailure[] | null = null;
  const last = pending.length - 1;
  for (let i = 0; i <= last; i++) {
    const handler = pending[i]!;
    const t0 = performance.now();
    try {
      await handler.handle(new HandlerCall(msg, payload as never, handler.name, ctx.log, ctx.signal));
    } catch (error) {
      (failures ??= []).push({ handler: handler.name, error, durationMs: Math.round(performance.now() - t0) });
      continue;
    }
    const durationMs = Math.round(performance.now() - t0);
    if (i === last && failures === null) {
      // The common case: recorded with DONE, in one (batched) write.
      msg.lastHandler = handler.name;
      msg.handlerMs = durationMs;
      return DONE;
    }
    const held = await persist(ctx.log, 'handler success', () => recordHandlerDone(ctx.db, msg.id, msg.claimId, handler.name));
    if (!held) {
      ctx.log.warn({ messageId: msg.publicId, handler: handler.name }, 'claim superseded (lease expired); leaving the message to its new claim');
      return null;
    }
    if (ctx.reporter.wants('done')) {
      ctx.reporter.outcome({ messageId: msg.publicId, topic: msg.topic, handler: handler.name, attempt: msg.attempts, outcome: 'done', durationMs });
    }
  }
  if (failures === null) return DONE; // every handler had already succeeded on an earlier attempt
  return verdictAfterRun({
    attempts: msg.attempts,
    maxAttempts: ctx.maxAttempts,
    ran: pending.map((h) => h.name),
    failures,
    backoff: ctx.backoff,
  });
}
