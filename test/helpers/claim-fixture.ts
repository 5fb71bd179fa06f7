import { afterAll, beforeAll, beforeEach } from 'vitest';
import { ClaimConnection, emptyOutbox } from '../../src/outbox/testing.ts';
import { createTestDatabase, type TestDatabase } from './db.ts';

/**
 * The claim tests' database: a lock_timeout on every connection (a claim that waited for a row
 * lock instead of skipping it fails within it, where it would otherwise hang until the test's own
 * timeout), a claim connection on it, and the outbox emptied before each test. `ready` is given
 * both once they exist.
 */
export function claimTestDatabase(
  name: string,
  lockTimeoutMs: number,
  ready: (f: { tdb: TestDatabase; claimer: ClaimConnection }) => void,
): void {
  let tdb: TestDatabase | undefined;
  let claimer: ClaimConnection | undefined;
  beforeAll(async () => {
    tdb = await createTestDatabase(name, { lockTimeoutMs });
    claimer = new ClaimConnection(tdb.db);
    ready({ tdb, claimer });
  });
  afterAll(async () => {
    await claimer?.close();
    await tdb?.drop();
  });
  beforeEach(async () => {
    await emptyOutbox(tdb!.pool);
  });
}
