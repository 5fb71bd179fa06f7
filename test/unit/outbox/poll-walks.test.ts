import { describe, expect, it } from 'vitest';
import { PollWalks } from '../../../src/outbox/testing.ts';

/*
 * Which walk the idle worker's poll makes (src/outbox/runner/poll-walks.ts): both indexes every
 * poll while a walk that finds nothing is cheap, spaced out by its cost once it is dear, never
 * further apart than 30 s or half a lease, and one slow walk does not space them.
 */

describe('PollWalks', () => {
  /** Three walks that found nothing, each costing `ms`, the last sent at `at`. */
  const walkedThrice = (walks: PollWalks, at: number, ms: number) => {
    for (const t of [at - 2000, at - 1000, at]) walks.walked(t, ms, 0);
  };

  it('walks both indexes at every poll before any walk, and while a walk that finds nothing costs at most a 500th of the poll', () => {
    const walks = new PollWalks(1000, 60);
    expect(walks.fullAt(0)).toBe(true);
    walkedThrice(walks, 10_000, 2);
    expect(walks.gapMs()).toBe(1000);
    expect(walks.fullAt(10_999)).toBe(false);
    expect(walks.fullAt(11_000)).toBe(true);
  });

  it('spaces full walks by 500 times the cost of one that found nothing, at most 30 s apart', () => {
    const walks = new PollWalks(1000, 60);
    walkedThrice(walks, 0, 12);
    expect(walks.gapMs()).toBe(6000);
    expect(walks.fullAt(5999)).toBe(false);
    expect(walks.fullAt(6000)).toBe(true);
    const dear = new PollWalks(1000, 60);
    walkedThrice(dear, 0, 400);
    expect(dear.gapMs()).toBe(30_000);
  });

  it('never spaces them by more than half a lease: a dead worker’s messages wait at most that much longer', () => {
    const walks = new PollWalks(250, 5);
    walkedThrice(walks, 0, 12);
    expect(walks.gapMs()).toBe(2500);
  });

  it("does not space them on a connection's first walks, which also make its plans", () => {
    const walks = new PollWalks(1000, 60);
    walks.walked(0, 60, 0);
    walks.walked(1000, 40, 0);
    expect(walks.gapMs()).toBe(1000);
    walks.walked(2000, 12, 0);
    expect(walks.gapMs()).toBe(6000);
  });

  it('takes the cheapest of the last three walks that found nothing: one slowed by the machine does not space them', () => {
    const walks = new PollWalks(1000, 60);
    walks.walked(0, 1, 0);
    walks.walked(1000, 50, 0);
    walks.walked(2000, 12, 0);
    expect(walks.gapMs()).toBe(1000);
    walks.walked(8000, 14, 0);
    expect(walks.gapMs()).toBe(6000); // 1 ms is no longer among the last three
  });

  it('counts a walk that claimed messages as a full walk, not its cost: leasing a batch says nothing of the entries passed', () => {
    const walks = new PollWalks(1000, 60);
    walkedThrice(walks, 0, 12);
    walks.walked(3000, 200, 500);
    expect(walks.gapMs()).toBe(6000);
    expect(walks.fullAt(8999)).toBe(false);
    expect(walks.fullAt(9000)).toBe(true);
  });

  it('never walks both indexes more often than the poll, however long the poll', () => {
    const walks = new PollWalks(60_000, 60);
    walkedThrice(walks, 0, 400);
    expect(walks.gapMs()).toBe(60_000);
  });
});
