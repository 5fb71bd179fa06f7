import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import { purgeDone } from '../outbox/purge.ts';

/*
 * The worker's housekeeping, every OUTBOX_PURGE_INTERVAL_SECONDS (and once at start): rows that
 * nobody will read again are deleted in bounded batches (1,000 rows a statement, each its own
 * short transaction, SKIP LOCKED so two workers never wait on each other), stopping between two
 * batches when the worker stops.
 *   - outbox: DONE messages older than OUTBOX_RETENTION_DAYS (src/outbox/purge.ts);
 *   - idempotency_keys: keys past expires_at, with their stored responses. An expired key is
 *     already ignored by POST /bookings (src/bookings/idempotency.ts), so deleting it changes no
 *     answer; walks idempotency_keys_expires_idx;
 *   - sessions: expired or revoked sessions. Either one is refused by the session lookup already,
 *     so deleting it changes no answer; only the table stops growing.
 */

const BATCH = 1000;

export async function deleteExpiredIdempotencyKeys(db: Db, batchSize = BATCH): Promise<number> {
  const res = await db.execute(sql`
    delete from idempotency_keys
     where (user_id, key) in (select user_id, key from idempotency_keys
                               where expires_at <= now()
                               order by expires_at
                               limit ${batchSize}
                                 for update skip locked)`);
  return res.rowCount ?? 0;
}

export async function deleteEndedSessions(db: Db, batchSize = BATCH): Promise<number> {
  const res = await db.execute(sql`
    delete from sessions
     where id in (select id from sessions
                   where expires_at <= now() or revoked_at is not null
                   limit ${batchSize}
                     for update skip locked)`);
  return res.rowCount ?? 0;
}

export interface HousekeepingCounts {
  outbox: number;
  idempotencyKeys: number;
  sessions: number;
}

/** One round: each table batch after batch until a batch comes back short, or `stopping()`. */
export async function housekeepOnce(
  db: Db,
  opts: { retentionDays: number; stopping?: () => boolean },
): Promise<HousekeepingCounts> {
  const stopping = opts.stopping ?? (() => false);
  const drain = async (one: () => Promise<number>) => {
    let total = 0;
    while (!stopping()) {
      const n = await one();
      total += n;
      if (n < BATCH) break;
    }
    return total;
  };
  return {
    outbox: await drain(() => purgeDone(db, { retentionDays: opts.retentionDays, batchSize: BATCH, maxBatches: 1 })),
    idempotencyKeys: await drain(() => deleteExpiredIdempotencyKeys(db)),
    sessions: await drain(() => deleteEndedSessions(db)),
  };
}

/** The timer: first round at once, then every `intervalSeconds`; never two rounds at a time. */
export class Housekeeping {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly opts: { retentionDays: number; intervalSeconds: number; onPurged?: (counts: HousekeepingCounts) => void },
  ) {}

  start(): void {
    this.schedule(0);
  }

  private schedule(delayMs: number) {
    this.timer = setTimeout(() => {
      this.running = this.round().finally(() => {
        this.running = undefined;
        if (!this.stopped) this.schedule(this.opts.intervalSeconds * 1000);
      });
    }, delayMs);
    this.timer.unref();
  }

  private async round(): Promise<void> {
    try {
      const counts = await housekeepOnce(this.db, { retentionDays: this.opts.retentionDays, stopping: () => this.stopped });
      this.opts.onPurged?.(counts);
      if (counts.outbox > 0) this.log.info({ purged: counts.outbox, retentionDays: this.opts.retentionDays }, 'purged old DONE messages');
      if (counts.idempotencyKeys > 0 || counts.sessions > 0) {
        this.log.info({ idempotencyKeys: counts.idempotencyKeys, sessions: counts.sessions }, 'deleted expired idempotency keys and ended sessions');
      }
    } catch (err) {
      this.log.warn({ err: { message: (err as Error).message } }, 'housekeeping failed; will try again next time');
    }
  }

  /** Stops the timer and waits for a round in progress (it stops between two batches). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }
}
