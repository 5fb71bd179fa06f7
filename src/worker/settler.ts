import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import type { ClaimedMessage } from '../outbox/claim.ts';
import { DoneBatcher, markDead, releaseUnknownTopic, scheduleRetry } from '../outbox/settle.ts';
import type { OutcomeReporter } from './events.ts';
import type { Verdict } from './verdict.ts';

/** What happened to the message as a whole. 'lost' = our claim was superseded (lease ran out) or not recorded. */
export type MessageOutcome = 'done' | 'retry' | 'dead' | 'unknown_topic' | 'lost';

/**
 * Records verdicts (src/worker/verdict.ts) in the database, the one place that does: DONE through
 * the group commit (src/outbox/settle.ts DoneBatcher: one UPDATE for everything that finished
 * together), retry, dead and unknown-topic each as its own fenced UPDATE (rare, and each carries
 * its own error text or delay). Then reports the outcome events and tells the loop the message is
 * no longer held (`onSettled`).
 */
export class Settler {
  private readonly done: DoneBatcher<ClaimedMessage>;
  private singles = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly reporter: OutcomeReporter,
    private readonly unknownTopicRecheckSeconds: number,
    private readonly onSettled: (msg: ClaimedMessage, outcome: MessageOutcome) => void,
  ) {
    this.done = new DoneBatcher<ClaimedMessage>(db, this.doneRecorded);
  }

  settle(msg: ClaimedMessage, verdict: Verdict | null): void {
    if (verdict === null) {
      this.onSettled(msg, 'lost');
      return;
    }
    if (verdict.kind === 'done') {
      this.done.add(msg);
      return;
    }
    this.singles++;
    void this.settleOne(msg, verdict).finally(() => {
      if (--this.singles === 0) this.wakeIdle();
    });
  }

  /** Resolves when every verdict handed in so far is recorded (or given up on). */
  async settled(): Promise<void> {
    await this.done.settled();
    while (this.singles > 0) await new Promise<void>((r) => this.idle.push(r));
  }

  private wakeIdle() {
    const w = this.idle;
    this.idle = [];
    for (const f of w) f();
  }

  private readonly doneRecorded = (msg: ClaimedMessage, held: boolean | null, err?: unknown): void => {
    if (held === true) {
      if (msg.lastHandler !== null && this.reporter.wants('done')) {
        this.reporter.outcome({
          messageId: msg.publicId, topic: msg.topic, handler: msg.lastHandler, attempt: msg.attempts, outcome: 'done', durationMs: msg.handlerMs,
        });
      }
      this.onSettled(msg, 'done');
      return;
    }
    if (held === false) {
      this.log.warn({ messageId: msg.publicId }, 'claim superseded (lease expired); leaving the message to its new claim');
    } else {
      this.log.error({ err: { message: (err as Error)?.message }, messageId: msg.publicId }, 'could not record done; the lease will bring the message back');
    }
    this.onSettled(msg, 'lost');
  };

  private async settleOne(msg: ClaimedMessage, verdict: Exclude<Verdict, { kind: 'done' }>): Promise<void> {
    const held = await persist(this.log, verdict.kind, () => {
      switch (verdict.kind) {
        case 'retry':
          return scheduleRetry(this.db, msg.id, msg.claimId, verdict.delaySeconds, verdict.error);
        case 'dead':
          return markDead(this.db, msg.id, msg.claimId, verdict.error);
        case 'unknown_topic':
          return releaseUnknownTopic(this.db, msg.id, msg.claimId, this.unknownTopicRecheckSeconds);
      }
    });
    if (!held) {
      this.onSettled(msg, 'lost');
      return;
    }
    const base = { messageId: msg.publicId, topic: msg.topic, attempt: msg.attempts };
    if (verdict.kind === 'unknown_topic') {
      this.reporter.outcome({ ...base, handler: null, outcome: 'unknown_topic', durationMs: 0 });
    } else if (verdict.failures.length === 0) {
      this.reporter.outcome({ ...base, handler: null, outcome: 'dead', durationMs: 0, error: verdict.error });
    } else {
      for (const f of verdict.failures) {
        this.reporter.outcome({ ...base, handler: f.handler, outcome: verdict.kind, durationMs: f.durationMs, error: f.error });
      }
    }
    this.onSettled(msg, verdict.kind);
  }
}

/**
 * A write that must not be lost to a blip: tried a few times (~6 s). If the database stays
 * unreachable the outcome is not recorded, the lease runs out and the message is delivered again:
 * at-least-once, never lost.
 */
export async function persist(log: Logger, what: string, op: () => Promise<boolean>): Promise<boolean> {
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
