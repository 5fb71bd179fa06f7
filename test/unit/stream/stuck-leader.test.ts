import { describe, expect, it } from 'vitest';
import { StuckLeaderWatch } from '../../../src/events/stuck-leader.ts';

describe('the relay watching for a stream leader that takes no publish', () => {
  it('leaves an election alone: nothing asked before the bound', () => {
    const watch = new StuckLeaderWatch(20_000);
    expect(watch.nobodyTook(1_000)).toBe(false);
    expect(watch.nobodyTook(15_000)).toBe(false);
    expect(watch.nobodyTook(20_999)).toBe(false);
    expect(watch.stuckMs(20_999)).toBe(19_999);
  });

  it('asks once the bound has passed, then at most once per bound while it lasts', () => {
    const watch = new StuckLeaderWatch(20_000);
    watch.nobodyTook(0);
    expect(watch.nobodyTook(20_000)).toBe(true);
    expect(watch.nobodyTook(20_001)).toBe(false);
    expect(watch.nobodyTook(39_999)).toBe(false);
    expect(watch.nobodyTook(40_000)).toBe(true);
  });

  it('starts over after a publish is stored', () => {
    const watch = new StuckLeaderWatch(20_000);
    watch.nobodyTook(0);
    expect(watch.nobodyTook(25_000)).toBe(true);
    watch.stored();
    expect(watch.stuckMs(30_000)).toBe(0);
    expect(watch.nobodyTook(30_000)).toBe(false);
    expect(watch.nobodyTook(49_999)).toBe(false);
    expect(watch.nobodyTook(50_000)).toBe(true);
  });
});
