import { EventsUnavailableError } from './errors.ts';

/*
 * The relay's circuit breaker: how the relay learns that NATS is away, and stops each relayed
 * message from holding a worker slot to find it out again. Every publish waiting on a NATS that
 * does not answer holds a slot; the guests' emails of other bookings wait for those slots.
 *
 *   closed ──(a publish fails for want of NATS · nothing answered for STALL · disconnect)──▶ open
 *   open ──(cool-down over: the next publish is let through as the probe)──▶ half-open
 *   half-open ──(the probe is answered · any reply · reconnect)──▶ closed
 *   half-open ──(the probe fails)──▶ open, for twice the cool-down (MIN_COOL_DOWN_MS … MAX_COOL_DOWN_MS)
 *   any ──(disconnect)──▶ open until the reconnect, which closes it at once
 *
 * - **One failure opens it.** A hung server (SIGSTOP, a full disk, a cut network that keeps the
 *   socket) answers nothing: waiting for several timeouts in a row to be sure is several times
 *   EVENTS_PUBLISH_TIMEOUT_MS of every slot held. A false alarm costs a short wait of the messages
 *   in flight, never an attempt (they are postponed, src/outbox/runner/verdict.ts).
 * - **A stall opens it before any timeout**: publishes are out and nothing at all has come back
 *   for `stallMs` (a healthy server answers in milliseconds, and under load its answers keep
 *   coming). The oldest publish out becomes the probe; every other publish out is let go at once
 *   (it fails with EventsUnavailableError; if the server stored it after all, its next publish is
 *   a duplicate by Nats-Msg-Id, a success). Without it every publish sent in the first timeout of
 *   a hang waits out that timeout in its slot.
 * - **Half-open lets exactly one probe through**; the others fail at once while it is out.
 * - **Any reply closes it** (a PubAck, or the server refusing an event: it answers), and so does
 *   the connection's `reconnect`, at once. A failure of a publish sent before the last close says
 *   nothing about NATS now (it went to a connection that is gone) and changes nothing.
 *
 * Its failures are not the messages' fault: the relay turns EventsUnavailableError into the
 * outbox's DependencyUnavailableError, and the message waits without spending an attempt, for
 * about as long as NATS has been away (`awaySeconds`, capped by BACKOFF_MAX_SECONDS).
 */

export const MIN_COOL_DOWN_MS = 1_000;
/**
 * A hung server that resumes says nothing (no reconnect): the next probe finds it. So the cap is
 * also how long the relay may go on failing once NATS is fine again; one probe per cool-down
 * holds one slot, for at most the publish timeout.
 */
export const MAX_COOL_DOWN_MS = 5_000;

export type CircuitState = 'closed' | 'open' | 'half-open';

/** One publish as the circuit follows it, from `enter` to its outcome. */
export interface Ticket {
  readonly sentAt: number;
  /** Let through while half-open: its outcome closes or reopens the circuit. */
  probe: boolean;
  /** The close it was sent after: a failure of an older ticket is stale. */
  readonly generation: number;
  /** Fails the waiting publish at once (set by `unlessTripped`). */
  letGo?: (err: EventsUnavailableError) => void;
}

export interface CircuitOptions {
  /** Nothing answered for this long while publishes are out: NATS is taken to be hung. */
  stallMs: number;
  /** It left `closed` (once per outage, not per failed probe): what it saw. */
  onOpen?: (why: string) => void;
  /** It closed again, after NATS had been away for `awayMs`. */
  onClose?: (awayMs: number) => void;
}

export class PublishCircuit {
  private state: CircuitState = 'closed';
  private openUntil = 0;
  private coolDownMs = MIN_COOL_DOWN_MS;
  private generation = 0;
  private disconnectedSince: number | null = null;
  /** When the circuit last left `closed`: how long NATS has been away. */
  private awaySince: number | null = null;
  private why = '';
  /** Publishes out, oldest first (a Set keeps insertion order). */
  private readonly out = new Set<Ticket>();
  private lastAnswerAt = 0;
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly where: string,
    private readonly opts: CircuitOptions,
  ) {}

  get current(): CircuitState {
    return this.state;
  }

  /**
   * Before a publish: its ticket, or EventsUnavailableError while NATS is known to be away (open,
   * or half-open with its probe out). The first publish after a cool-down is the probe.
   */
  enter(): Ticket {
    const now = Date.now();
    if (this.disconnectedSince !== null) {
      throw this.unavailable(now, `disconnected ${seconds(now - this.disconnectedSince)} s ago`);
    }
    if (this.state === 'closed' && this.stalled(now)) this.trip(now, this.silence(now));
    if (this.state === 'open') {
      if (now < this.openUntil) throw this.unavailable(now, this.why);
      this.state = 'half-open';
      return this.send(now, true);
    }
    if (this.state === 'half-open') throw this.unavailable(now, `${this.why}; one publish is out to test it`);
    return this.send(now, false);
  }

  /**
   * Waits for `work` (the publish of `t`), unless the circuit trips first: then a publish other
   * than the probe fails at once with EventsUnavailableError instead of waiting out its timeout
   * in its slot. `work` still runs to its end, observed by the caller's outcome handlers.
   */
  unlessTripped<T>(t: Ticket, work: Promise<T>): Promise<T> {
    if (t.probe) return work;
    return new Promise<T>((resolve, reject) => {
      t.letGo = reject;
      work.then(resolve, reject);
    });
  }

  /** NATS replied to `t` (a PubAck, or a refusal: either way it is there). Closes the circuit. */
  answered(t: Ticket): void {
    this.settle(t);
    this.lastAnswerAt = Date.now();
    if (this.state !== 'closed') this.close();
  }

  /**
   * `t` failed for want of NATS (a timeout, a refused or closed connection). Opens the circuit,
   * unless `t` is stale (sent before the last close) or the circuit already knows (open, or
   * half-open with another probe out). Returns true when this failure opened it.
   */
  failed(t: Ticket, reason: string): boolean {
    this.settle(t);
    if (t.generation !== this.generation) return false;
    if (this.state === 'closed' || (this.state === 'half-open' && t.probe)) {
      this.trip(Date.now(), reason);
      return true;
    }
    return false;
  }

  /**
   * `t` ended some other way (a bug, an aborted call): no word about NATS. A probe that ends so
   * leaves the question open: the next publish is the next probe (left half-open, with no probe
   * out, the circuit would refuse every publish for ever).
   */
  forget(t: Ticket): void {
    this.settle(t);
    if (t.probe && this.state === 'half-open' && t.generation === this.generation) {
      this.state = 'open';
      this.openUntil = Date.now();
    }
  }

  disconnected(): void {
    const now = Date.now();
    this.disconnectedSince ??= now;
    // Replies to what was sent on the lost connection will never come: let it all go now.
    this.trip(now, 'disconnected');
  }

  reconnected(): void {
    this.disconnectedSince = null;
    this.close();
  }

  /** How long NATS has been away, in seconds (at least 1): how long a message may as well wait. */
  awaySeconds(): number {
    const now = Date.now();
    return Math.max(1, (now - (this.disconnectedSince ?? this.awaySince ?? now)) / 1000);
  }

  /** The stall timer is the circuit's only resource. */
  stop(): void {
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
  }

  private send(now: number, probe: boolean): Ticket {
    const t: Ticket = { sentAt: now, probe, generation: this.generation };
    this.out.add(t);
    if (this.out.size === 1) this.watch(now);
    return t;
  }

  private settle(t: Ticket): void {
    this.out.delete(t);
    t.letGo = undefined;
  }

  private lastHeard(): number {
    const oldest = this.out.values().next().value as Ticket | undefined;
    return Math.max(oldest?.sentAt ?? Infinity, this.lastAnswerAt);
  }

  /** Publishes are out, and nothing has come back since the oldest of them went, or since the last reply. */
  private stalled(now: number): boolean {
    return this.out.size > 0 && now - this.lastHeard() >= this.opts.stallMs;
  }

  /** One timer for all publishes out, armed for the moment the oldest of them would count as stalled. */
  private watch(now: number): void {
    if (this.stallTimer !== undefined || this.state !== 'closed' || this.out.size === 0) return;
    const due = Math.max(0, this.lastHeard() + this.opts.stallMs - now);
    this.stallTimer = setTimeout(() => {
      // Timers run before the loop reads its sockets: after a pause of our own (GC, a busy
      // machine) the replies may be waiting unread. Look once more after they have been read.
      setImmediate(() => {
        this.stallTimer = undefined;
        const at = Date.now();
        if (this.state === 'closed' && this.stalled(at)) this.trip(at, this.silence(at));
        else this.watch(at);
      });
    }, due);
    this.stallTimer.unref();
  }

  /**
   * NATS is away. From closed with publishes out: the oldest stays out as the probe (half-open),
   * the rest are let go. Otherwise open for the cool-down, which doubles each time.
   */
  private trip(now: number, reason: string): void {
    const opening = this.state === 'closed';
    this.awaySince ??= now;
    this.why = `NATS at ${this.where} is not answering (${reason})`;
    // Every publish out is of this generation while closed (close() forgets the older ones).
    const probe = opening && this.disconnectedSince === null ? (this.out.values().next().value as Ticket | undefined) : undefined;
    if (probe) {
      probe.probe = true;
      this.state = 'half-open';
    } else {
      this.state = 'open';
      this.openUntil = now + this.coolDownMs;
      this.coolDownMs = Math.min(this.coolDownMs * 2, MAX_COOL_DOWN_MS);
    }
    this.stop();
    const err = this.unavailable(now, this.why);
    for (const t of [...this.out]) {
      if (t === probe || !t.letGo) continue;
      const letGo = t.letGo;
      t.letGo = undefined;
      letGo(err);
    }
    if (opening) this.opts.onOpen?.(this.why);
  }

  private silence(now: number): string {
    return `no reply to any publish for ${((now - this.lastHeard()) / 1000).toFixed(1)} s`;
  }

  /**
   * Publishes still out were sent before NATS came back (on a connection that may be gone): the
   * circuit stops following them, so their silence cannot trip it again and their failures are
   * stale. A reply from one of them still counts.
   */
  private close(): void {
    const awayMs = this.state === 'closed' ? null : Date.now() - (this.awaySince ?? Date.now());
    this.state = 'closed';
    this.generation++;
    this.coolDownMs = MIN_COOL_DOWN_MS;
    this.awaySince = null;
    this.openUntil = 0;
    this.lastAnswerAt = Date.now();
    this.out.clear();
    this.stop();
    if (awayMs !== null) this.opts.onClose?.(awayMs);
  }

  private unavailable(now: number, what: string): EventsUnavailableError {
    return new EventsUnavailableError(
      `${what.startsWith('NATS') ? what : `NATS at ${this.where} is unreachable (${what})`}: the event waits in the outbox and is relayed once NATS answers`,
      this.awaySeconds(),
    );
  }
}

const seconds = (ms: number) => Math.max(0, Math.round(ms / 1000));
