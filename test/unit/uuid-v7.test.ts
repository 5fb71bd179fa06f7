import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { uuidV7 } from '../../src/db/uuid-v7.ts';

describe('uuidV7', () => {
  it('is a version-7 UUID of the RFC 9562 variant, carrying the time in milliseconds', () => {
    const at = Date.UTC(2026, 11, 1, 12, 30, 0, 123);
    const id = uuidV7(at);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(at);
    expect(z.uuid().safeParse(id).success).toBe(true);
  });

  it('sorts by time, and ids of one millisecond differ', () => {
    const ids = [uuidV7(1_000), uuidV7(2_000), uuidV7(3_000)];
    expect([...ids].sort()).toEqual(ids);
    const same = new Set(Array.from({ length: 1000 }, () => uuidV7(5_000)));
    expect(same.size).toBe(1000);
  });
});
