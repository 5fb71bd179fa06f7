import pg from 'pg';
import { ConfigError } from '../config.ts';
import type { Logger } from '../logger.ts';
import type { Pooler } from './pooler.ts';

/*
 * Whether a transaction-mode pooler stands in front of DATABASE_URL, whatever DATABASE_POOLER says.
 *
 * A process told `none` or `session` relies on its session: named statements (src/db/prepared.ts)
 * and, in the worker, the claim connection's session settings (synchronous_commit = off,
 * enable_seqscan = off…). Behind a transaction-mode pool the named statements fail ("prepared
 * statement … already exists"), and the settings land on server connections the pooler then hands
 * to other clients, the API among them, and stay there after the worker has gone: its bookings then
 * commit without waiting for the disk. Reading the settings back does not catch it: a quiet
 * PgBouncer hands a client the server connection it has just released, so the read-back finds them.
 *
 * What only a pooler that shares server connections between transactions can do: show one client
 * two backends, or two clients connected at once the same backend. Two clients of our own, A and B,
 * read pg_backend_pid() in turns, B inside a transaction (so it holds a server connection while A
 * asks): on PostgreSQL, through a plain TCP proxy or through a session-mode pool, A always sees one
 * backend and B another. Through a transaction-mode pool B is given the backend A has just released
 * (PgBouncer's default, the most recently used), or A moves between backends (round robin, or other
 * clients' traffic): a few rounds see it either way. Nothing is set, so nothing is left behind.
 */

/** Rounds of the probe: round robin over n server connections shows A a second backend by the second round. */
const ROUNDS = 3;

/** What the probe saw: the backends each client was served by. */
export interface PoolerProbe {
  transactionPooled: boolean;
  a: number[];
  b: number[];
}

/** Reads which backends serve two connections of `connectionString`, in turns; see above. */
export async function probeTransactionPooler(connectionString: string, opts: { timeoutMs?: number } = {}): Promise<PoolerProbe> {
  const config: pg.ClientConfig = {
    connectionString,
    application_name: 'stayhub-pooler-probe',
    connectionTimeoutMillis: opts.timeoutMs ?? 5_000,
    // Client-side: PgBouncer in transaction mode queues a statement while every server connection is busy.
    query_timeout: opts.timeoutMs ?? 5_000,
  };
  const a = new pg.Client(config);
  const b = new pg.Client(config);
  // A connection the server ends while we wait must not crash the process (as guardPool, src/db/client.ts).
  for (const c of [a, b]) c.on('error', () => {});
  const pid = async (c: pg.Client) => (await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
  const seen: PoolerProbe = { transactionPooled: false, a: [], b: [] };
  const shared = () => new Set(seen.a).size > 1 || new Set(seen.b).size > 1 || seen.a.some((p) => seen.b.includes(p));
  try {
    await Promise.all([a.connect(), b.connect()]);
    for (let round = 0; round < ROUNDS && !shared(); round++) {
      seen.a.push(await pid(a));
      // A statement-mode pool refuses transactions outright: it shares backends between statements.
      const began = await b.query('begin').then(
        () => true,
        (err: Error) => (/statement pooling mode/.test(err.message) ? false : Promise.reject(err)),
      );
      if (!began) return { ...seen, transactionPooled: true };
      try {
        seen.b.push(await pid(b));
        // B may already hold A's backend: asking A now would wait for B behind a pool of one.
        if (!shared()) seen.a.push(await pid(a));
      } finally {
        await b.query('commit');
      }
    }
    seen.transactionPooled = shared();
    return seen;
  } finally {
    await Promise.all([a.end().catch(() => undefined), b.end().catch(() => undefined)]);
  }
}

/** What gave the pool away, for the refusal's line. */
function evidence(probe: PoolerProbe): string {
  if (probe.b.length === 0) return 'it refuses transactions: a statement-mode pool';
  return `one connection was served by backends ${[...new Set(probe.a)].join(', ')}, another by ${[...new Set(probe.b)].join(', ')} at the same time`;
}

/**
 * Refuses to start (ConfigError: one line, exit 2) a process told DATABASE_POOLER=none or session
 * whose DATABASE_URL is in fact a transaction-mode pool; `fix` says what to do instead. With
 * `transaction` there is nothing to check: that setting relies on no session. A database that
 * cannot be reached is not this check's to judge: it is logged and the start goes on, to fail (or
 * wait) where it did before.
 */
export async function refuseUndeclaredTransactionPooler(opts: {
  process: string;
  connectionString: string;
  pooler: Pooler;
  fix: string;
  log?: Logger;
}): Promise<void> {
  if (opts.pooler === 'transaction') return;
  let probe: PoolerProbe;
  try {
    probe = await probeTransactionPooler(opts.connectionString);
  } catch (err) {
    opts.log?.warn({ err }, 'could not check whether DATABASE_URL leads to a transaction-mode pooler');
    return;
  }
  if (!probe.transactionPooled) return;
  throw new ConfigError([
    `DATABASE_POOLER=${opts.pooler}, but DATABASE_URL leads to a transaction-mode pooler (${evidence(probe)}): ` +
      `${opts.process} would fail on its named statements and leave session settings on connections others get. ${opts.fix}: docs/scaling.md`,
  ]);
}
