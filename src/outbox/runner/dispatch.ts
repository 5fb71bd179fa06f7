import type { Logger } from '../../logger.ts';
import { retryDelaySeconds, type BackoffOptions } from '../backoff.ts';
import type { ClaimedMessage } from '../claim.ts';
import type { HandlerFailure, LaneDeferral, PayloadIssue, PayloadSchema, Verdict } from '../types.ts';
import { describeFailure, isPermanent, isPostponement, NEUTRAL_FAILURE_RULES, type FailureRules } from './failures.ts';
import type { Handler, HandlerContext, HandlerRegistry } from './registry.ts';
import { runHandlerInSpan, tracingOn } from './tracing.ts';
import { ALREADY_DONE, postponeDelaySeconds, verdictAfterRun, verdictBeforeRun } from './verdict.ts';

export interface DispatchContext {
  registry: HandlerRegistry;
  /** The application's payload schemas by topic; a topic without one is handed its payload as stored. */
  payloadSchemas: Readonly<Record<string, PayloadSchema>>;
  log: Logger;
  signal: AbortSignal;
  maxAttempts: number;
  backoff: BackoffOptions;
  /** The application's failure rules: what is permanent, what an error's text must not keep. */
  failureRules: FailureRules;
  /**
   * Records a handler's success when another handler of the same message runs after it (the
   * settler, src/outbox/settle.ts: dispatch holds no connection of its own). False: the claim is no longer
   * ours, stop here.
   */
  handlerDone(msg: ClaimedMessage, handler: string, durationMs: number): Promise<boolean>;
  /**
   * Moves own-lane handlers' work into their lanes (src/outbox/lanes.ts), under the claim, and
   * reports the failures among them. False: the claim is no longer ours, stop here.
   */
  deferToLanes(msg: ClaimedMessage, deferrals: readonly LaneDeferral[]): Promise<boolean>;
}

/** The failure rules dispatch applies: the application's (WorkerOptions.failureRules) over the neutral ones, a field at a time. */
export function failureRules(given: Partial<FailureRules> | undefined): FailureRules {
  return given ? { ...NEUTRAL_FAILURE_RULES, ...given } : NEUTRAL_FAILURE_RULES;
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
    return this.msg.eventId;
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
      messageId: this.msg.eventId,
      topic: this.msg.topic,
      attempt: this.msg.attempts,
      handler: this.handler,
    }));
  }
}

function describeIssues(topic: string, issues: readonly PayloadIssue[], rules: FailureRules): string {
  const text = issues.map((i) => `${i.path.join('.') || '(root)'} ${i.message}`).join('; ');
  return rules.redact(`payload: ${rules.payloadErrorName}: does not match the ${topic} schema: ${text}`).slice(0, 2000);
}

/**
 * Runs one claimed message through its handlers and returns the verdict (src/outbox/runner/verdict.ts):
 * done, retry at T, postpone to T, dead, or unknown topic; null when the claim was lost midway (nothing more to
 * record). It never throws, and no transaction is open while a handler runs. Recording the verdict
 * is the caller's next step (src/outbox/settle.ts).
 *
 * Handlers of one message run one after the other, every one even after another failed (the
 * guest's email should not wait for the host's mail server). A success followed by another
 * handler is recorded the moment it finishes, through `ctx.handlerDone` (if the worker dies before
 * the next one, the redelivery does not repeat it); the success that completes the message is
 * carried by the DONE verdict and recorded with DONE, in the same write.
 */
export async function dispatch(ctx: DispatchContext, msg: ClaimedMessage): Promise<Verdict | null> {
  try {
    return await run(ctx, msg);
  } catch (err) {
    // run() turns handler failures into a verdict itself; reaching here is a bug. The lease brings the message back.
    ctx.log.error({ err, messageId: msg.publicId }, 'dispatch failed unexpectedly');
    return null;
  }
}

async function run(ctx: DispatchContext, msg: ClaimedMessage): Promise<Verdict | null> {
  const all = ctx.registry.handlersFor(msg.topic);
  // A lane message runs its one handler; without it in this worker, it waits like an unknown topic.
  const handlers = msg.lane === null ? all : all.filter((h) => h.name === msg.lane);
  // Topics of the application's contract have a payload schema; others (tests, bench) do not.
  let payload = msg.payload;
  let invalid: string | null = null;
  const schema = Object.hasOwn(ctx.payloadSchemas, msg.topic) ? ctx.payloadSchemas[msg.topic] : undefined;
  if (handlers.length > 0 && msg.attempts <= ctx.maxAttempts && schema !== undefined) {
    const parsed = schema.safeParse(msg.payload);
    if (parsed.success) payload = parsed.data;
    else invalid = describeIssues(msg.topic, parsed.error.issues, ctx.failureRules);
  }
  const early = verdictBeforeRun({
    handlerCount: handlers.length,
    attempts: msg.attempts,
    maxAttempts: ctx.maxAttempts,
    payloadError: invalid,
  });
  if (early) return early;

  const pending: readonly Handler[] = msg.handlersDone.length === 0 ? handlers : handlers.filter((h) => !msg.handlersDone.includes(h.name));
  // Own-lane handlers keep their own order per key (src/outbox/lanes.ts); a lane message is already in its lane.
  const laned = msg.key !== null && msg.lane === null;
  let failures: HandlerFailure[] | null = null;
  let deferred: LaneDeferral[] | null = null;
  const last = pending.length - 1;
  for (let i = 0; i <= last; i++) {
    const handler = pending[i]!;
    const ownLane = laned && handler.ownLane === true;
    if (ownLane && msg.lanesBusy.includes(handler.name)) {
      // Its earlier work of this key is still waiting in the lane: this one queues behind it, unrun.
      (deferred ??= []).push({ handler: handler.name, delaySeconds: 0, attempts: 0, error: null, durationMs: 0 });
      continue;
    }
    const t0 = performance.now();
    try {
      const call = new HandlerCall(msg, payload as never, handler.name, ctx.log, ctx.signal);
      await (tracingOn() ? runHandlerInSpan(handler, call) : handler.handle(call));
    } catch (error) {
      const durationMs = Math.round(performance.now() - t0);
      // A permanent failure is not deferred: no retry helps it, in a lane or not (the message dead-letters).
      if (ownLane && !isPermanent(error, ctx.failureRules)) {
        // Its downstream away: the lane message starts with no attempt spent, and waits as a postponement does.
        const postponed = isPostponement(error);
        (deferred ??= []).push({
          handler: handler.name,
          delaySeconds: postponed ? postponeDelaySeconds(error.retryAfterSeconds, ctx.backoff) : retryDelaySeconds(1, ctx.backoff),
          attempts: postponed ? 0 : 1,
          error: describeFailure(handler.name, error, ctx.failureRules),
          durationMs,
        });
      } else {
        (failures ??= []).push({ handler: handler.name, error, durationMs });
      }
      continue;
    }
    const durationMs = Math.round(performance.now() - t0);
    // The common case: the last handler, none failed; recorded with DONE, in one (batched) write.
    if (i === last && failures === null && deferred === null) return { kind: 'done', handler: handler.name, durationMs };
    if (!(await ctx.handlerDone(msg, handler.name, durationMs))) return null;
  }
  if (deferred !== null && !(await ctx.deferToLanes(msg, deferred))) return null;
  if (failures === null) return ALREADY_DONE; // every handler has succeeded, now or earlier, or waits in its lane
  return verdictAfterRun({
    attempts: msg.attempts,
    maxAttempts: ctx.maxAttempts,
    ran: pending.filter((h) => deferred === null || !deferred.some((d) => d.handler === h.name)).map((h) => h.name),
    failures,
    backoff: ctx.backoff,
    rules: ctx.failureRules,
  });
}
