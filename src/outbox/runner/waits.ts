import type { NotifiedMessage } from '../claim.ts';

/**
 * The loop's two ways of waiting (./loop.ts), and what ends each:
 * - a pause (the poll interval, a failed claim's backoff), ended early by a wake-up (a
 *   notification, stop()) or by a settled message of a key (the next message of its key may be
 *   due; the loop asks whether one is live before it claims);
 * - the next change (a slot came free, a message settled, a hand-back finished), for a loop that
 *   cannot claim more yet and for the waits of runUntilEmpty and stop().
 */
export class LoopWaits {
  /** Set by a wake-up that arrived since the loop last cleared it (as a claim begins). */
  pending = false;
  /**
   * The messages the wake-ups since then were about, when every one of them named its message
   * (src/outbox/channel.ts); null once one did not (a wake-up after a commit, a reconnect, stop())
   * or there are more than a claim takes: the loop then walks.
   */
  private notified: NotifiedMessage[] | null = [];
  /** How many notified messages the loop still claims by id (the claim's size). */
  maxNotified = 1000;
  /** Set by every message settled since then, with a key or without. */
  settledAny = false;
  /** The keys of the messages settled since then; null once there are too many to ask about. */
  private keys: Set<string> | null = new Set();
  /** Whether the loop asks about settled keys (it runs, rather than draining until empty). */
  keepKeys = false;
  private wakeUp: (() => void) | undefined;
  private waiters: (() => void)[] = [];

  /** A wake-up; `about` is the message it names, if it names one. */
  wake(about?: NotifiedMessage | null): void {
    this.pending = true;
    if (about == null || (this.notified !== null && this.notified.length >= this.maxNotified)) this.notified = null;
    else this.notified?.push(about);
    this.wakeUp?.();
  }

  /**
   * The messages named by the wake-ups since the last claim began, taken, when each wake-up named
   * one and they are at most `limit`; the wake-ups are then answered (`pending` cleared) and the
   * settled keys kept. Null otherwise, nothing changed: the loop walks.
   */
  takeNotified(limit: number): NotifiedMessage[] | null {
    const about = this.notified;
    if (!this.pending || about === null || about.length === 0 || about.length > limit) return null;
    this.pending = false;
    this.notified = [];
    return about;
  }

  /**
   * A message was settled. Only one with a key can make another due (the next of its key), and
   * only if a later message of that key is live: ./loop.ts asks before it claims.
   */
  settled(key: string | null): void {
    this.settledAny = true;
    if (key === null || !this.keepKeys) return;
    if (this.keys !== null) {
      this.keys.add(key);
      // Past this many, asking about each key costs more than the claim it could save.
      if (this.keys.size > MAX_KEYS_TO_ASK) this.keys = null;
    }
    this.wakeUp?.();
  }

  /** A claim begins: it sees whatever the wake-ups and settled messages so far were about. */
  claimBegins(): void {
    this.pending = false;
    this.notified = [];
    this.settledAny = false;
    this.keys = new Set();
  }

  /**
   * The keys settled since the last claim began or the last call, taken: an empty array when
   * none, null when too many were settled to ask about (the loop then claims).
   */
  takeSettledKeys(): string[] | null {
    const keys = this.keys;
    this.keys = new Set();
    return keys === null ? null : [...keys];
  }

  /** Sleeps `ms`, or less: a wake-up or a settled key ends it, and one already there skips it. */
  pause(ms: number): Promise<void> {
    if (this.pending || this.keys === null || this.keys.size > 0) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wakeUp = () => {
        this.wakeUp = undefined;
        done();
      };
    });
  }

  /** Something changed: every waiter of nextChange() runs. */
  changed(): void {
    if (this.waiters.length === 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  nextChange(): Promise<void> {
    return new Promise((r) => this.waiters.push(r));
  }
}

const MAX_KEYS_TO_ASK = 1000;
