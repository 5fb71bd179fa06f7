/**
 * How many messages the worker's next claim asks for: small when the outbox is quiet, growing while
 * a backlog lasts.
 *
 * Each claim costs a round trip and a statement, whatever its size. A worker that is behind and
 * claims 20 at a time spends most of its time on those; one that claims 1,000 at a time while
 * idle would take a whole burst for itself and leave other workers nothing to share. So:
 * - a claim that came back full (there is more) while the local queue had run dry (the handlers
 *   were waiting for it: claims are what holds this worker back) doubles the next one, up to `max`;
 *   a full claim that found messages still queued keeps the size: the handlers are what holds it
 *   back, and a larger claim would only make messages wait longer here;
 * - one that came back less than half full halves it, down to `min`;
 * - one in between keeps it.
 *
 * The lease bounds it too. A claimed message waits in the local queue until a handler slot is
 * free, and its lease runs from the claim (a message with less than half its lease left is handed
 * back, not started: src/outbox/runner/heartbeat.ts). When a message waited more than an eighth of
 * the lease before it started, the handlers are slower than the claims are large: the next claim
 * is halved instead of grown, so claimed work is started long before it could be handed back.
 */
export class ClaimSize {
  private limit: number;
  /** A message waited more than an eighth of the lease in the local queue since the last claim. */
  private crowded = false;
  private readonly leaseMs: number;

  constructor(
    /** WORKER_BATCH_SIZE: the first claim, and the smallest. */
    readonly min: number,
    /** WORKER_MAX_BATCH_SIZE: the largest (never below min). */
    readonly max: number,
    leaseSeconds: number,
  ) {
    if (!Number.isInteger(min) || min < 1) throw new Error(`claim size must be a positive integer, got ${min}`);
    this.max = Math.max(min, Math.floor(max));
    this.limit = min;
    this.leaseMs = leaseSeconds * 1000;
  }

  /** The next claim's limit. */
  get next(): number {
    return this.limit;
  }

  /** A claim asked for `asked` messages and got `got`; `queued` were still waiting locally when they came. */
  claimed(asked: number, got: number, queued: number): void {
    if (this.crowded) {
      this.crowded = false;
      this.limit = Math.max(this.min, Math.floor(asked / 2));
    } else if (got >= asked) {
      if (queued === 0) this.limit = Math.min(this.max, asked * 2);
    } else if (got < asked / 2) {
      this.limit = Math.max(this.min, Math.floor(asked / 2));
    }
  }

  /**
   * A message starts at `now` with its lease ending at `leaseUntilMs` (ClaimedMessage.leaseUntilMs,
   * counted from when its claim was sent): what it lost is how long it waited in the local queue.
   */
  started(leaseUntilMs: number, now: number): void {
    if (this.leaseMs - (leaseUntilMs - now) > this.leaseMs / 8) this.crowded = true;
  }
}
