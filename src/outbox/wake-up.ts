import type pg from 'pg';
import { run, statement } from '../db/prepared.ts';
import { OUTBOX_CHANNEL } from './topics.ts';

/*
 * The worker's wake-up after a commit (`pg_notify('outbox', topic)`), coalesced.
 *
 * A wake-up carries no data: it only says "look at the outbox now". So when many transactions
 * commit at once, one notify sent AFTER all of their commits wakes the worker for all of them, and
 * the rest are round trips (and a pool checkout each) for nothing: under load they were one of the
 * booking path's five round trips.
 *
 * The rule kept: every commit is followed by a notify that STARTS after that commit (its caller
 * asks only once it has committed). While one notify is in flight, requests made in the meantime
 * cannot count on it (it may have been sent before their commit), so they share the next one,
 * started as soon as the in-flight one is done. At most one notify per (pool, topic) is in flight
 * and at most one is waiting. A failed notify changes nothing: the worker's poll finds the rows.
 */
const NOTIFY = statement('outbox-notify-v1', 'select pg_notify($1, $2)');

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
  if (!w) topics.set(topic, (w = new CoalescedWakeUp(() => run(pool, NOTIFY, [OUTBOX_CHANNEL, topic]))));
  return w;
}
