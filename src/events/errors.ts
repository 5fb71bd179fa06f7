/**
 * NATS is away, refused, or did not answer in time: the events path's one "not now" error. The
 * relay's circuit throws it (src/events/circuit.ts), and the admin API's monitor
 * (src/events/monitor.ts), which answers 503 with it. One class, so that every `instanceof` of it
 * means the same thing wherever the error came from; two classes of one name made such a check
 * silently false for the other's errors.
 */
export class EventsUnavailableError extends Error {
  readonly code = 'events_unavailable';
  constructor(
    message: string,
    /**
     * How long NATS has been away, in seconds: how long it is worth waiting before trying again.
     * 0 when nobody has followed it (the monitor learns of an outage from one read).
     */
    readonly awaySeconds = 0,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'EventsUnavailableError';
  }
}
