import { describe, expect, it } from 'vitest';
import { HandBacks } from '../../../src/outbox/index.ts';

/** A write that resolves when the test says so, recording the order writes started in. */
function gatedWrites() {
  const started: number[][] = [];
  const gates: Array<(n: number) => void> = [];
  return {
    started,
    write: (items: readonly number[]) => {
      started.push([...items]);
      return new Promise<number>((resolve) => gates.push(resolve));
    },
    open: (i: number, n: number) => gates[i]!(n),
  };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('HandBacks', () => {
  it('writes one batch after another, and settles once every batch queued is written', async () => {
    const w = gatedWrites();
    const done: Array<[number[], number]> = [];
    let finished = 0;
    const hb = new HandBacks<number>({
      write: w.write,
      done: (items, n) => done.push([[...items], n]),
      failed: () => expect.unreachable(),
      finished: () => finished++,
    });
    hb.later([1, 2]);
    hb.later([3]);
    expect(hb.pending).toBe(2);
    await tick();
    expect(w.started).toEqual([[1, 2]]); // the second waits for the first
    let settled = false;
    void hb.settled.then(() => (settled = true));
    w.open(0, 2);
    await tick();
    expect(w.started).toEqual([[1, 2], [3]]);
    expect(hb.pending).toBe(1);
    w.open(1, 0); // claimed again by another worker meanwhile: the fence matched nothing
    await tick();
    expect(settled).toBe(true);
    expect(hb.pending).toBe(0);
    expect(done).toEqual([
      [[1, 2], 2],
      [[3], 0],
    ]);
    expect(finished).toBe(2);
  });

  it('reports a failed write and carries on with the next batch', async () => {
    const failures: Array<[unknown, number[]]> = [];
    const written: number[][] = [];
    const hb = new HandBacks<number>({
      write: (items) => {
        written.push([...items]);
        return items[0] === 1 ? Promise.reject(new Error('connection lost')) : Promise.resolve(items.length);
      },
      failed: (err, items) => failures.push([err, [...items]]),
    });
    hb.later([1]);
    hb.later([2, 3]);
    await hb.settled;
    expect(written).toEqual([[1], [2, 3]]);
    expect(failures).toHaveLength(1);
    expect(String(failures[0]![0])).toContain('connection lost');
    expect(failures[0]![1]).toEqual([1]);
    expect(hb.pending).toBe(0);
  });

  it('queues nothing for an empty batch', async () => {
    let writes = 0;
    const hb = new HandBacks<number>({ write: async () => (writes++, 0), failed: () => {} });
    hb.later([]);
    expect(hb.pending).toBe(0);
    await hb.settled;
    expect(writes).toBe(0);
  });
});
