import { describe, expect, it } from 'vitest';
import { intArray, textArray, uuidArray } from '../../../src/outbox/testing.ts';

describe('array literals for the worker batched writes', () => {
  it('numbers and uuids as they are, text quoted and escaped, null as NULL', () => {
    expect(intArray([1, 22, 333])).toBe('{1,22,333}');
    expect(intArray([])).toBe('{}');
    expect(uuidArray(['0b5c5a2e-6b1f-4bfc-9d3c-1f0e7a0d7c11'])).toBe('{0b5c5a2e-6b1f-4bfc-9d3c-1f0e7a0d7c11}');
    expect(textArray(['email.guest', null, 'a "b" \\ c,d'])).toBe('{"email.guest",NULL,"a \\"b\\" \\\\ c,d"}');
  });
});
