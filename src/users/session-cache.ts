import type { Db } from '../db/client.ts';
import type { UserRow } from './users.repository.ts';

/*
 * A very short memory of session lookups, so a client sending requests back to back costs one
 * session query a second instead of one a request (the lookup was one of the booking path's seven
 * round trips).
 *
 * The bound that matters: a session revoked (logout) or expired is served for at most
 * SESSION_CACHE_MS after it ended. Within this process logout evicts at once; another API process
 * learns it by its entry running out, within that second. An entry never outlives the session's own
 * expiry. Only live sessions are remembered (never a refusal, so a new token works at once). One
 * cache per database handle, so two apps in one process (the tests) never share entries.
 */
export const SESSION_CACHE_MS = 1_000;
const MAX_ENTRIES = 10_000;

interface Entry {
  user: UserRow;
  until: number;
}

export class SessionCache {
  private readonly entries = new Map<string, Entry>();
  constructor(private readonly ttlMs = SESSION_CACHE_MS) {}

  get(tokenHash: string, now = Date.now()): UserRow | undefined {
    const e = this.entries.get(tokenHash);
    if (!e) return undefined;
    if (e.until > now) return e.user;
    this.entries.delete(tokenHash);
    return undefined;
  }

  set(tokenHash: string, user: UserRow, sessionExpiresAt: Date, now = Date.now()): void {
    if (this.ttlMs <= 0) return;
    const until = Math.min(now + this.ttlMs, sessionExpiresAt.getTime());
    if (until <= now) return;
    // Bounded: the oldest entry (Map keeps insertion order) makes room. Re-setting moves it last.
    this.entries.delete(tokenHash);
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(tokenHash, { user, until });
  }

  delete(tokenHash: string): void {
    this.entries.delete(tokenHash);
  }
}

const caches = new WeakMap<Db, SessionCache>();

export function sessionCacheFor(db: Db): SessionCache {
  let c = caches.get(db);
  if (!c) caches.set(db, (c = new SessionCache()));
  return c;
}
