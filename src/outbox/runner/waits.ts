/**
 * The loop's two ways of waiting (./loop.ts), and what ends each:
 * - a pause (the poll interval, a failed claim's backoff), ended early by a wake-up: a
 *   notification, a settled message (the next message of its key may be due), stop();
 * - the next change (a slot came free, a message settled, a hand-back finished), for a loop that
 *   cannot claim more yet and for the waits of runUntilEmpty and stop().
 */
export class LoopWaits {
  /** Set by a wake-up that arrived since the loop last cleared it (as a claim begins). */
  pending = false;
  private wakeUp: (() => void) | undefined;
  private waiters: (() => void)[] = [];

  wake(): void {
    this.pending = true;
    this.wakeUp?.();
  }

  /** Sleeps `ms`, or less: a wake-up ends it, and one already pending skips it. */
  pause(ms: number): Promise<void> {
    if (this.pending) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wakeUp = () => {
        this.wakeUp = undefined;
        done();
      };
    });
  }

  /** Something changed: every waiter of nextChange() runs. */
  changed(): void {
    if (this.waiters.length === 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  nextChange(): Promise<void> {
    return new Promise((r) => this.waiters.push(r));
  }
}
