import pg from 'pg';
import type { Logger } from '../../logger.ts';
import { backoffDelaySeconds } from '../backoff.ts';
import { execute, unnamed } from '../executor.ts';

/** Between reconnection attempts: 0.5 s, 1 s, 2 s, … up to 30 s. */
const RECONNECT_BACKOFF = { baseSeconds: 0.5, maxSeconds: 30 };

/**
 * LISTEN on the outbox channel over one dedicated connection (a pooled connection would be handed
 * to someone else, and LISTEN belongs to a session). `enqueue` (and `requeueDead`) send pg_notify
 * inside the producer's transaction or right after its COMMIT (src/outbox/enqueue.ts says when
 * which), so the worker wakes within milliseconds of a message becoming visible, and never for a
 * rolled-back one. A notify lost between COMMIT and send (the producer died) is covered by the
 * fallback poll.
 *
 * The connection can die (database restart, pg_terminate_backend, network). That must never crash
 * the worker, and notifications sent while it was down are lost, so: on error or end, reconnect
 * with a growing delay (0.5 s … 30 s), and after every (re)connect call `onNotify` once so the
 * worker looks for anything committed in the gap. The fallback poll covers the rest.
 */
export class OutboxListener {
  private client: pg.Client | undefined;
  private closed = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Clients whose loss has been handled ('error' and 'end' both fire for one loss). */
  private readonly gone = new WeakSet<pg.Client>();
  /** Resolves when the first connection attempt has ended, successful or not. */
  readonly ready: Promise<void>;
  private markReady!: () => void;

  constructor(
    private readonly connectionString: string,
    private readonly channel: string,
    private readonly onNotify: (payload: string | undefined) => void,
    private readonly log: Logger,
  ) {
    this.ready = new Promise((r) => (this.markReady = r));
  }

  get connected(): boolean {
    return this.client !== undefined;
  }

  start(): Promise<void> {
    void this.connect();
    return this.ready;
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({
      connectionString: this.connectionString,
      application_name: 'stayhub-worker-listen',
      keepAlive: true,
      connectionTimeoutMillis: 5_000,
    });
    client.on('notification', (n) => {
      if (n.channel === this.channel) this.onNotify(n.payload);
    });
    client.on('error', (err) => this.lost(client, err));
    client.on('end', () => this.lost(client));
    try {
      await client.connect();
      // The identifier is ours (a constant), not user input; LISTEN takes no bind parameter.
      await execute(client, unnamed(`LISTEN ${pg.escapeIdentifier(this.channel)}`), []);
    } catch (err) {
      this.lost(client, err);
      this.markReady();
      return;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    if (this.failures > 0) this.log.info({ channel: this.channel }, 'listener reconnected');
    this.failures = 0;
    this.markReady();
    this.onNotify(undefined);
  }

  private lost(client: pg.Client, err?: unknown) {
    if (this.gone.has(client)) return;
    this.gone.add(client);
    if (this.client === client) this.client = undefined;
    client.end().catch(() => {});
    if (this.closed) return;
    this.failures++;
    const delay = backoffDelaySeconds(this.failures, RECONNECT_BACKOFF) * 1000;
    this.log.warn(
      { err: err instanceof Error ? { message: err.message, code: (err as { code?: string }).code } : undefined, retryInMs: delay },
      'listener connection lost; reconnecting',
    );
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.connect(), delay);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const c = this.client;
    this.client = undefined;
    if (c) {
      this.gone.add(c);
      await c.end().catch(() => {});
    }
  }
}
