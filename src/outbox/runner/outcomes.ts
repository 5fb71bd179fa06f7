import { EventEmitter } from 'node:events';
import type { Logger } from '../../logger.ts';
import type { ClaimedMessage } from '../claim.ts';
import type { Outcome, OutcomeEvent, OutcomeSink, WorkerEvents } from '../types.ts';

/**
 * The worker's outcome events and how they are reported: one module, imported by the loop, the
 * dispatcher and the settler, so none of them imports another for it.
 *
 * ## Events (a stable contract: src/metrics/worker-metrics.ts subscribes to them)
 *
 * `worker.events` is an EventEmitter with:
 *
 * - `'claimed'`  `{ count: number }` — after every claim that returned at least one message.
 * - `'outcome'`  `OutcomeEvent` — once per handler outcome, and once per message for the
 *   message-level outcomes (handler: null):
 *     - `messageId`  the message's public id (uuid)
 *     - `topic`      e.g. 'order.created'
 *     - `handler`    the handler's name, or null for 'unknown_topic', 'handed_back', and a
 *                    'dead' decided before any handler ran (invalid payload, too many claims)
 *     - `attempt`    the attempt number (1 on the first delivery)
 *     - `outcome`    'done' (this handler succeeded) | 'retry' (failed; the message backs off) |
 *                    'postponed' (its downstream is unavailable: the message waits, attempt not
 *                    counted) | 'dead' (failed; the message is DEAD) | 'unknown_topic' (no handler; left
 *                    PENDING, attempt not counted) | 'handed_back' (claimed, never started,
 *                    returned: at shutdown, or too little of its lease left to start it)
 *     - `durationMs` how long the handler ran (0 for handed_back)
 *     - `error`      for 'retry', 'postponed' and 'dead': "handler: ErrorClass: message", email addresses removed
 *   An outcome is reported once it is recorded in the database.
 *
 * ## Logs
 *
 * The same fields are logged as 'outbox handler outcome': 'retry' at warn, 'dead' at error,
 * 'unknown_topic' and 'handed_back' at info, and 'done' and 'postponed' at DEBUG (during an
 * outage every waiting message is postponed again and again; the handler says once, at warn, that
 * its downstream is away, and the metrics count the postponements). A line per successful message
 * at info cost a worker a quarter of its throughput in the bench; what happened is still visible at
 * info in 'outbox worker progress', logged once a minute by a running worker when anything
 * happened (counts since the last line), and in 'outbox worker stopped'. LOG_LEVEL=debug brings
 * the per-message line back. When nobody listens and the level is off, no event object is built.
 */
const LEVEL = { done: 'debug', retry: 'warn', postponed: 'debug', dead: 'error', unknown_topic: 'info', handed_back: 'info' } as const;

export class OutcomeReporter implements OutcomeSink {
  readonly events = new EventEmitter<WorkerEvents>();

  constructor(private readonly log: Logger) {}

  /** Whether an outcome of this kind would be seen by anyone: build the event only then. */
  wants(outcome: Outcome): boolean {
    return this.events.listenerCount('outcome') > 0 || this.log.isLevelEnabled(LEVEL[outcome]);
  }

  outcome(event: OutcomeEvent): void {
    const level = LEVEL[event.outcome];
    if (this.log.isLevelEnabled(level)) this.log[level](event, 'outbox handler outcome');
    try {
      this.events.emit('outcome', event);
    } catch (err) {
      this.log.error({ err }, 'an outcome listener threw');
    }
  }

  /** Claimed messages went back unstarted (src/outbox/lease/hand-backs.ts). */
  handedBack(msgs: readonly ClaimedMessage[]): void {
    if (!this.wants('handed_back')) return;
    for (const m of msgs) {
      this.outcome({
        messageId: m.publicId,
        topic: m.topic,
        handler: null,
        attempt: m.attempts,
        outcome: 'handed_back',
        durationMs: 0,
      });
    }
  }

  claimed(count: number): void {
    if (this.events.listenerCount('claimed') === 0) return;
    try {
      this.events.emit('claimed', { count });
    } catch (err) {
      this.log.error({ err }, 'a claimed listener threw');
    }
  }
}

/** Messages by final outcome: the progress lines and the shutdown summary. */
export interface WorkerSummary {
  claimed: number;
  done: number;
  retried: number;
  /** Waited for a handler's downstream, no attempt spent (DependencyUnavailableError). */
  postponed: number;
  dead: number;
  unknownTopic: number;
  handedBack: number;
  /** Claims that were superseded before we could settle them (our lease had run out), or not recorded. */
  lost: number;
  purged: number;
}

export const emptySummary = (): WorkerSummary => ({
  claimed: 0,
  done: 0,
  retried: 0,
  postponed: 0,
  dead: 0,
  unknownTopic: 0,
  handedBack: 0,
  lost: 0,
  purged: 0,
});

/** 'outbox worker progress' at info every `intervalMs`, with the counts since the last line; silent when idle. */
export class ProgressLog {
  private timer: NodeJS.Timeout | undefined;
  private last = emptySummary();
  private lastAt = Date.now();

  constructor(
    private readonly log: Logger,
    private readonly counts: () => WorkerSummary,
    private readonly intervalMs = 60_000,
  ) {}

  start(): void {
    this.lastAt = Date.now();
    this.last = this.counts();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
  }

  private tick(): void {
    const now = this.counts();
    const delta = emptySummary();
    let any = false;
    for (const k of Object.keys(delta) as (keyof WorkerSummary)[]) {
      delta[k] = now[k] - this.last[k];
      if (delta[k] !== 0) any = true;
    }
    const seconds = (Date.now() - this.lastAt) / 1000;
    this.last = now;
    this.lastAt = Date.now();
    if (any)
      this.log.info({ ...delta, seconds: Math.round(seconds), perSecond: Math.round(delta.claimed / seconds) }, 'outbox worker progress');
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
