import { describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/client.ts';
import { withTransaction, type Tx } from '../../src/db/transaction.ts';
import { registerRetryableWriteFault } from '../../src/db/write-faults.ts';

/*
 * withTransaction's seam for faults registered by the modules above src/db/ (src/db/write-faults.ts):
 * a recognised fault is repaired and the work runs again; anything else is the caller's. No
 * database: a stand-in whose transactions fail as the test says. This file has a process of its
 * own (OWN_PROCESS in vitest.config.ts), so what is registered here stays here.
 */

class DayMissing extends Error {}

let repairs = 0;
registerRetryableWriteFault({
  name: 'test: a missing day',
  recognises: (err) => err instanceof DayMissing,
  repair: async () => void repairs++,
});

/** A Db whose transactions run `work` with a stand-in handle, failing first with `failures`, in order. */
function failingDb(failures: Error[]): Db {
  const transaction = async (fn: (tx: Tx) => Promise<unknown>) => {
    const failure = failures.shift();
    if (failure) throw failure;
    return fn({} as Tx);
  };
  return { transaction } as unknown as Db;
}

describe('withTransaction and the registered write faults', () => {
  it('repairs a recognised fault and runs the work again', async () => {
    repairs = 0;
    await expect(withTransaction(failingDb([new DayMissing()]), async () => 'written')).resolves.toBe('written');
    expect(repairs).toBe(1);
  });

  it('rethrows an error no fault recognises, without repairing or retrying', async () => {
    repairs = 0;
    const refused = new Error('refused');
    let runs = 0;
    await expect(withTransaction(failingDb([refused]), async () => void runs++)).rejects.toBe(refused);
    expect({ repairs, runs }).toEqual({ repairs: 0, runs: 0 });
  });

  it('gives up after its attempts: the last fault surfaces unrepaired', async () => {
    repairs = 0;
    const last = new DayMissing();
    await expect(withTransaction(failingDb([new DayMissing(), last]), async () => 'written', 2)).rejects.toBe(last);
    expect(repairs).toBe(1);
  });
});
