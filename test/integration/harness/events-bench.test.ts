import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchRelay } from '../../../scripts/bench/relay.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { skipWithoutNats } from '../../helpers/nats.ts';

/* Smoke run of the relay bench (scripts/bench/relay.ts): every message reaches the stream once. */

const skip = skipWithoutNats();
let tdb: TestDatabase;
beforeAll(async () => {
  if (!skip) tdb = await createTestDatabase('evbench');
});
afterAll(async () => {
  await tdb?.drop();
});

describe.skipIf(skip)('relay bench', () => {
  it('relays a backlog into JetStream and reports both drains', async () => {
    const count = Number(process.env.RELAY_BENCH_COUNT ?? 500);
    const r = await benchRelay({ databaseUrl: tdb.url, count, log: (l) => console.log(l) });
    console.log(JSON.stringify(r));
    expect(r.relay.streamMessages).toBe(count);
    expect(r.noop.perSecond).toBeGreaterThan(0);
    expect(r.relay.perSecond).toBeGreaterThan(0);
  }, 300_000);
});
