import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import type { ClaimedMessage } from '../claim.ts';
import { handBack } from '../lease.ts';
import type { OutcomeSink } from '../types.ts';

/**
 * Claimed messages the worker will not start (at shutdown, or with too little of their lease left)
 * go back, one batch after another, off the loop's path: a failure costs only the wait for the
 * lease's end. Each message handed back is reported as 'handed_back'.
 */
export class HandBacks {
  private chain: Promise<void> = Promise.resolve();
  private inFlight = 0;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly reporter: OutcomeSink,
    /** How many went back (the worker's summary). */
    private readonly counted: (n: number) => void,
    /** A batch was handed back (or failed to be): the loop may look again. */
    private readonly finished: () => void,
  ) {}

  /** Batches queued or being written. */
  get pending(): number {
    return this.inFlight;
  }

  /** Resolves once every batch queued so far is written (or failed). */
  get settled(): Promise<void> {
    return this.chain;
  }

  later(msgs: ClaimedMessage[]): void {
    this.inFlight++;
    this.chain = this.chain
      .then(() => this.handBack(msgs))
      .finally(() => {
        this.inFlight--;
        this.finished();
      });
  }

  private async handBack(msgs: ClaimedMessage[]): Promise<void> {
    if (msgs.length === 0) return;
    try {
      this.counted(await handBack(this.db, msgs));
    } catch (err) {
      // The lease ends on its own; handing back only saves the wait.
      this.log.warn({ err, count: msgs.length }, 'could not hand back claimed messages');
      return;
    }
    if (!this.reporter.wants('handed_back')) return;
    for (const m of msgs) {
      this.reporter.outcome({
        messageId: m.publicId,
        topic: m.topic,
        handler: null,
        attempt: m.attempts,
        outcome: 'handed_back',
        durationMs: 0,
      });
    }
  }
}
