import { describe, expect, it } from 'vitest';
import { optionalWholeNumberFlag, wholeNumberFlag } from '../../src/process/flags.ts';
import { UsageError } from '../../src/process/run-main.ts';

/* The one parser of every command's numeric flags (src/process/flags.ts). */

const range = { min: 1, max: 1000 };

describe('wholeNumberFlag', () => {
  it.each([
    ['1', 1],
    ['1000', 1000],
    ['0042', 42],
  ])('takes %j as %d', (value, n) => {
    expect(wholeNumberFlag('batch-size', value, range)).toBe(n);
  });

  it.each(['0', '1001', '99999999', '9'.repeat(400), '', ' 5', '5 ', '1e3', '0x10', '-1', '+5', '2.5', 'NaN', 'Infinity', 'lots'])(
    'refuses %j, naming the flag, the range and the value',
    (value) => {
      const attempt = () => wholeNumberFlag('batch-size', value, range);
      expect(attempt).toThrow(UsageError);
      expect(attempt).toThrow(`--batch-size must be a whole number from 1 to 1000 (got "${value}")`);
    },
  );

  it('leaves an absent optional flag undefined, and checks a given one', () => {
    expect(optionalWholeNumberFlag('days', undefined, { min: 0, max: 10 })).toBeUndefined();
    expect(optionalWholeNumberFlag('days', '0', { min: 0, max: 10 })).toBe(0);
    expect(() => optionalWholeNumberFlag('days', '11', { min: 0, max: 10 })).toThrow(UsageError);
  });
});
