import { describe, expect, it } from 'vitest';
import { ClaimedMessage, mergeByPriority } from '../../../src/outbox/testing.ts';

const msg = (id: number, priority: number) =>
  new ClaimedMessage(id, `m${id}`, 't', null, {}, 1, [], 'c', 0, 0, `m${id}`, null, [], null, null, priority);
const ids = (q: readonly ClaimedMessage[]) => q.map((m) => m.id);

describe('the local queue across claims', () => {
  it('starts a later claim’s higher-priority messages before the lower ones still queued, behind their equals', () => {
    const queued = [msg(1, 1), msg(2, 0), msg(3, 0)];
    expect(ids(mergeByPriority(queued, [msg(4, 1), msg(5, 0)]))).toEqual([1, 4, 2, 3, 5]);
  });

  it('appends a claim no higher than the queue’s tail, in its order', () => {
    const queued = [msg(1, 1), msg(2, 0)];
    const merged = mergeByPriority(queued, [msg(3, 0), msg(4, 0)]);
    expect(ids(merged)).toEqual([1, 2, 3, 4]);
    expect(merged).toBe(queued);
  });
});
