/**
 * The relay's circuit breaker. While NATS is known to be unreachable, a publish fails at once
 * instead of waiting out EVENTS_PUBLISH_TIMEOUT_MS (or a connect timeout): each waiting publish
 * holds a worker slot, and with NATS down every relayed message would hold one, so the guests'
 * emails of other bookings queued behind them. The outbox retries the failed publish with its
 * backoff, as it would any failure; nothing is lost, only the waiting is.
 *
 * "Known" two ways:
 *   - the connection says so: a `disconnect` status opens the circuit until `reconnect`;
 *   - or publishes say so: FAILURES_TO_OPEN failures in a row (timeouts, refused connections)
 *     open it for a cool-down that doubles each time it opens again (up to MAX_COOL_DOWN_MS), and
 *     closes on the next success. After a cool-down publishes are let through again: the probe.
 */
export class EventsUnavailableError extends Error {
  readonly code = 'events_unavailable';
  constructor(message: string) {
    super(message);
    this.name = 'EventsUnavailableError';
  }
}

export const FAILURES_TO_OPEN = 3;
export const MIN_COOL_DOWN_MS = 1_000;
export const MAX_COOL_DOWN_MS = 30_000;

export class PublishCircuit {
  private failures = 0;
  private openUntil = 0;
  private coolDownMs = MIN_COOL_DOWN_MS;
  private disconnectedSince: number | null = null;

  constructor(
    private readonly where: string,
    private readonly now: () => number = Date.now,
  ) {}

  /** Throws EventsUnavailableError while the circuit is open. */
  check(): void {
    if (this.disconnectedSince !== null) {
      throw new EventsUnavailableError(
        `NATS at ${this.where} is unreachable (disconnected ${Math.round((this.now() - this.disconnectedSince) / 1000)} s ago): the event stays in the outbox and is retried`,
      );
    }
    if (this.now() < this.openUntil) {
      throw new EventsUnavailableError(
        `NATS at ${this.where} did not take the last ${this.failures} publishes: not trying again for ${Math.ceil((this.openUntil - this.now()) / 1000)} s; the event stays in the outbox and is retried`,
      );
    }
  }

  get isOpen(): boolean {
    return this.disconnectedSince !== null || this.now() < this.openUntil;
  }

  succeeded(): void {
    this.failures = 0;
    this.openUntil = 0;
    this.coolDownMs = MIN_COOL_DOWN_MS;
  }

  /** A publish failed for want of NATS (not for a refused event). Returns true when this failure opened the circuit. */
  failed(): boolean {
    this.failures++;
    if (this.failures < FAILURES_TO_OPEN || this.now() < this.openUntil) return false;
    this.openUntil = this.now() + this.coolDownMs;
    this.coolDownMs = Math.min(this.coolDownMs * 2, MAX_COOL_DOWN_MS);
    return true;
  }

  disconnected(): void {
    this.disconnectedSince ??= this.now();
  }

  reconnected(): void {
    this.disconnectedSince = null;
    this.succeeded();
  }
}
