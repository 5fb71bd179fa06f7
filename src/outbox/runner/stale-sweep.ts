/**
 * A timer that hands back, while their lease still runs, the queued messages that can no longer
 * start (less than half their lease left: Heartbeat.canStart). The worker's pump does that only
 * when a slot comes free; while every slot is held (handlers waiting on NATS or SMTP for longer
 * than a lease) the lease used to run out in the local queue. Another worker then claimed the
 * message again, this worker's hand-back, fenced on its own claim, matched nothing, and the
 * attempt that claim counted was never given back: enough of those and the message was
 * dead-lettered ("claimed N times without an outcome") without ever having run.
 *
 * It ticks every quarter of a lease while anything waits, so a message goes back with between a
 * quarter and half of its lease left, and stops once the queue is empty.
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
