import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiFixture } from '../../../scripts/bench/api.ts';
import { overloadLoad } from '../../../scripts/bench/overload.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * The API under more clients than it can serve: the API as `npm run api` runs it (its own process,
 * its defaults, LOG_LEVEL=warn), 1,000 clients over real HTTP for 15 s, half booking (every request
 * a stay no one else asked for) and half searching, driven by the bench's overload section
 * (scripts/bench/overload.ts), which also compares what the clients were told with what the
 * database kept. Before load shedding, bookings here waited 8 s each and the only refusals were
 * pool timeouts saying the database was unavailable.
 *
 * An end-to-end file (vitest.config.ts): it needs the machine to itself.
 */

const CLIENTS = 1000;
const SECONDS = 15;

let db: TestDatabase;
let api: ApiFixture | undefined;
const logDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-overload-'));

beforeAll(async () => {
  db = await createTestDatabase('overload');
  // The bench's fixture starts the API with shedding off (it measures capacity there): on here, the defaults otherwise.
  api = await startApi(db.url, { guests: 32, properties: 100 }, logDir, undefined, { LOAD_SHEDDING: 'true' });
}, 120_000);
afterAll(async () => {
  await api?.close();
  await db?.drop();
  rmSync(logDir, { recursive: true, force: true });
});

describe(`${CLIENTS} clients booking and searching for ${SECONDS} s`, () => {
  it(
    'refuses with 503 overloaded and Retry-After, fails nothing else, keeps accepted bookings fast and each with its email; reads go first',
    { timeout: 120_000 },
    async () => {
      const r = await overloadLoad(api!, { connections: CLIENTS, seconds: SECONDS });
      const said = JSON.stringify(r);

      // It was overload: some requests were refused, and every refusal said so and when to return.
      expect(r.share503, said).toBeGreaterThan(0);
      expect(r.noRetryAfter, said).toBe(0);
      expect(r.not503Overloaded, said).toBe(0);
      // Nothing else failed: no 5xx but 503, no other answer, every request answered.
      expect(r.other5xx, said).toBe(0);
      expect(r.otherStatus, said).toBe(0);
      expect(r.errors, said).toBe(0);
      // What was accepted was served in time, and kept: a row and its booking.created (the emails)
      // for every 201, and no booking for a client told anything else.
      expect(r.accepted, said).toBeGreaterThan(0);
      expect(r.acceptedP99, said).toBeLessThan(2000);
      expect(r.lost, said).toBe(0);
      expect(r.doubled, said).toBe(0);
      // Searches are refused before bookings: a larger share of them. (Not "earlier": a refusal is
      // answered after a pause, and a search let in at the start may wait its whole turn first.)
      expect(r.searchShare503, said).toBeGreaterThan(r.bookingShare503);
    },
  );
});
