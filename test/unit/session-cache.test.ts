import { describe, expect, it } from 'vitest';
import { SESSION_CACHE_MS, SessionCache } from '../../src/users/session-cache.ts';
import type { UserRow } from '../../src/users/users.repository.ts';

const user = (id: number): UserRow => ({
  id,
  publicId: `00000000-0000-4000-8000-${String(id).padStart(12, '0')}`,
  email: `u${id}@example.test`,
  name: `U ${id}`,
  role: 'guest',
  passwordHash: 'x',
  createdAt: new Date(0),
  updatedAt: new Date(0),
});

describe('SessionCache', () => {
  const farFuture = new Date(Date.now() + 86_400_000);

  it('serves an entry for at most SESSION_CACHE_MS (1 s), then forgets it', () => {
    expect(SESSION_CACHE_MS).toBeLessThanOrEqual(1_000);
    const c = new SessionCache();
    c.set('h', user(1), farFuture, 10_000);
    expect(c.get('h', 10_000)?.id).toBe(1);
    expect(c.get('h', 10_000 + SESSION_CACHE_MS - 1)?.id).toBe(1);
    expect(c.get('h', 10_000 + SESSION_CACHE_MS)).toBeUndefined();
  });

  it('never outlives the session itself', () => {
    const c = new SessionCache();
    const now = Date.now();
    c.set('h', user(1), new Date(now + 200), now);
    expect(c.get('h', now + 199)?.id).toBe(1);
    expect(c.get('h', now + 200)).toBeUndefined();
    c.set('gone', user(2), new Date(now - 1), now); // already expired: not remembered at all
    expect(c.get('gone', now)).toBeUndefined();
  });

  it('delete (logout) forgets at once; a zero TTL remembers nothing', () => {
    const c = new SessionCache();
    c.set('h', user(1), farFuture);
    c.delete('h');
    expect(c.get('h')).toBeUndefined();
    const off = new SessionCache(0);
    off.set('h', user(1), farFuture);
    expect(off.get('h')).toBeUndefined();
  });

  it('is bounded: the oldest entries make room', () => {
    const c = new SessionCache();
    const now = Date.now();
    for (let i = 0; i < 10_050; i++) c.set(`h${i}`, user(i), farFuture, now);
    expect(c.get('h0', now)).toBeUndefined();
    expect(c.get('h10049', now)?.id).toBe(10_049);
  });
});
