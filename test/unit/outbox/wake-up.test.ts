import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CoalescedWakeUp } from '../../../src/outbox/testing.ts';

/** A send that the test completes by hand, recording when each started and finished (a logical clock). */
function harness() {
  let clock = 0;
  const sends: { startedAt: number; finishedAt?: number; finish: () => void }[] = [];
  const w = new CoalescedWakeUp(
    () =>
      new Promise<void>((resolve, reject) => {
        const s = { startedAt: ++clock, finishedAt: undefined as number | undefined, finish: () => {} };
        s.finish = () => {
          s.finishedAt = ++clock;
          if (sends.length % 3 === 0)
            reject(new Error('notify failed')); // failures change nothing
          else resolve();
        };
        sends.push(s);
      }),
  );
  return { w, sends, tick: () => ++clock, now: () => clock };
}

const flush = () => new Promise((r) => setImmediate(r));

describe('CoalescedWakeUp', () => {
  it('one request, one notify; requests during it share ONE next notify', async () => {
    const { w, sends } = harness();
    const first = w.request();
    expect(sends).toHaveLength(1);
    const during = Array.from({ length: 10 }, () => w.request());
    expect(sends).toHaveLength(1); // not yet: the next waits for the in-flight one
    sends[0]!.finish();
    await first;
    await flush();
    expect(sends).toHaveLength(2);
    sends[1]!.finish();
    await Promise.all(during);
    expect(w.sent).toBe(2);
  });

  it('every request is answered only after a notify that started after it (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.constant('request' as const), fc.constant('finish' as const)), { maxLength: 60 }),
        async (ops) => {
          const { w, sends, tick } = harness();
          const requests: { at: number; resolvedAt?: number }[] = [];
          for (const op of ops) {
            if (op === 'request') {
              const r: { at: number; resolvedAt?: number } = { at: tick() };
              requests.push(r);
              void w.request().then(() => (r.resolvedAt = tick()));
            } else {
              sends.find((s) => s.finishedAt === undefined)?.finish();
            }
            await flush();
          }
          // Drain: finish whatever is in flight until every request is answered.
          for (let i = 0; i < 200 && requests.some((r) => r.resolvedAt === undefined); i++) {
            sends.find((s) => s.finishedAt === undefined)?.finish();
            await flush();
          }
          for (const r of requests) {
            expect(r.resolvedAt).toBeDefined();
            const covering = sends.find((s) => s.startedAt > r.at && s.finishedAt !== undefined && s.finishedAt < r.resolvedAt!);
            expect(covering, `request at ${r.at}`).toBeDefined();
          }
          expect(sends.filter((s) => s.finishedAt === undefined).length).toBeLessThanOrEqual(1);
          // Coalesced: never more notifies than requests.
          expect(sends.length).toBeLessThanOrEqual(requests.length);
        },
      ),
      { numRuns: 200 },
    );
  });
});
