import type pg from 'pg';
import { OUTBOX_CHANNEL } from './channel.ts';
import { run, statement, type Executor } from './executor.ts';

/*
 * The worker's wake-up after a commit (`pg_notify('outbox', topic)`), coalesced.
 *
 * This wake-up names no message (the one sent inside a transaction does: src/outbox/channel.ts):
 * it only says "look at the outbox now". So when many transactions
 * commit at once, one notify sent AFTER all of their commits wakes the worker for all of them, and
 * the rest are round trips (and a pool checkout each) for nothing: under load they were one of the
 * hottest write path's five round trips.
 *
 * The rule kept: every commit is followed by a notify that STARTS after that commit (its caller
 * asks only once it has committed). While one notify is in flight, requests made in the meantime
 * cannot count on it (it may have been sent before their commit), so they share the next one,
 * started as soon as the in-flight one is done. At most one notify per (pool, topic) is in flight
 * and at most one is waiting. A failed notify changes nothing: the worker's poll finds the rows.
 */
const NOTIFY = statement('outbox-notify-v1', 'select pg_notify($1, $2)');

/** A wake-up that names no message, sent now on `q`: `says` is why (a topic, 'requeue', 'hand-back'). */
export async function wakeUpSaying(q: Executor, says: string): Promise<void> {
  await run(q, NOTIFY, [OUTBOX_CHANNEL, says]);
}

export class CoalescedWakeUp {
  private inFlight: Promise<void> | null = null;
  private queued: Promise<void> | null = null;
  /** Notifies actually sent (for tests and diagnostics). */
  sent = 0;

  constructor(private readonly send: () => Promise<unknown>) {}

  /** Resolves once a notify that started after this call has completed (or failed). */
  request(): Promise<void> {
    if (!this.inFlight) return this.start();
    // The in-flight notify may predate the caller's commit: wait for the next one.
    return (this.queued ??= this.inFlight.then(() => {
      this.queued = null;
      return this.start();
    }));
  }

  private start(): Promise<void> {
    this.sent++;
    const p: Promise<void> = this.send()
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        if (this.inFlight === p) this.inFlight = null;
      });
    this.inFlight = p;
    return p;
  }
}

const byPool = new WeakMap<pg.Pool, Map<string, CoalescedWakeUp>>();

/** The coalesced wake-up for `topic` on this pool (one per pool and topic). */
export function wakeUpFor(pool: pg.Pool, topic: string): CoalescedWakeUp {
  let topics = byPool.get(pool);
  if (!topics) byPool.set(pool, (topics = new Map<string, CoalescedWakeUp>()));
  let w = topics.get(topic);
  if (!w) topics.set(topic, (w = new CoalescedWakeUp(() => wakeUpSaying(pool, topic))));
  return w;
}

/*
 * Which path a transaction's wake-up takes: inside it, or after its COMMIT.
 *
 * Inside, the COMMIT itself delivers the notify, with no round trip of its own: the fastest
 * wake-up (commit to handler on an idle worker, p50 2.1–2.9 ms against 3.3–3.5 after the COMMIT,
 * docs/adr/0021-wake-up-inside-a-lone-transaction.md). But a notifying COMMIT holds PostgreSQL's
 * cluster-wide notification lock through its WAL flush, so two of them never commit together
 * (ADR 0002). So one transaction of this process at a time carries its wake-up inside: the first
 * to ask while no other does. The rest, the load that would queue on the lock, take the coalesced
 * wake-up after their COMMIT. The process cannot see other processes' carriers: at worst each
 * process has one transaction waiting at the lock.
 */
let carrier: object | null = null;

/**
 * True when `tx` carries its wake-up inside itself: it already did, or no other transaction of
 * this process does, and `tx` will tell when it ends (`atEnd` runs its function when `tx` has ended
 * and returns true; false for a transaction not started by `withTransaction`). A transaction that
 * cannot tell is never the carrier, or the process would lose the inside path for good.
 */
export function carriesWakeUpInside(tx: object, atEnd: (ended: () => void) => boolean): boolean {
  if (carrier === tx) return true;
  if (carrier !== null) return false;
  const ends = atEnd(() => {
    if (carrier === tx) carrier = null;
  });
  if (ends) carrier = tx;
  return ends;
}
