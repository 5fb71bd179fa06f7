/**
 * A timer that hands back, while their lease still runs, the queued rows that can no longer start.
 * A queue's pump does that only when a slot comes free; while every slot is held (the outbox's
 * handlers waiting on NATS or SMTP for longer than a lease, a host's endpoints hanging for their
 * whole timeout) the lease used to run out in the local queue. Another worker then claimed the row
 * again, this worker's hand-back, fenced on its own claim, matched nothing, and the attempt that
 * claim counted was never given back: enough of those and a message was dead-lettered ("claimed
 * N times without an outcome") without ever having run.
 *
 * It ticks while anything waits and stops once the queue is empty: the outbox's worker every
 * quarter of a lease (a message goes back with between a quarter and half of its lease left:
 * Heartbeat.canStart), the webhook sender every second (src/webhooks/delivery/slots.ts).
 */
export class StaleSweep {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly everyMs: number,
    /** Hands back what can no longer start; returns whether anything still waits. */
    private readonly sweep: () => boolean,
  ) {}

  /** Something was queued: sweep from now on, until the queue is empty. */
  ensure(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => {
      if (!this.sweep()) this.stop();
    }, this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
