import pg from 'pg';
import type { Db } from '../db/client.ts';
import { guardPool } from '../db/client.ts';
import { execute, executorOf, run, unnamed, type Statement } from './executor.ts';
import { textArray } from './sql.ts';

/*
 * The worker's own connections, and why it has them.
 *
 * The claim and the batched writes that follow it (DONE, the lease extension, the hand-back) are
 * sent as named prepared statements, planned once per connection and then run from the cached
 * plan. A cached plan is made once, from the statistics and the table's size at that moment, and
 * reused whatever the outbox becomes. So it must be safe for every outbox, not just the one it was
 * made on: after a quiet spell (or on a new table, or a day just made) the statistics describe a
 * few rows, all DONE, and a burst of 20,000 messages then looks like a handful. What that did to
 * the claim: src/outbox/claim-connection.ts; to the DONE batch: PlannedConnection below.
 *
 * A planned connection's planner is therefore left one way to answer: no sequential scan, no
 * bitmap scan, no sort, no hash, merge, material or memoize node. What remains are index walks
 * and probes, each statement written so that the index it needs is the one that can serve it.
 *
 * The other settings: `synchronous_commit = off`, the worker's own commits do not wait for their
 * WAL flush (what a database crash can then cause: src/outbox/sql.ts; set per statement it was a
 * join that cost a third of the claim's planning). `plan_cache_mode = force_generic_plan`: the
 * cached plan from the first execution on, instead of five custom plans first. JIT off: these
 * statements take milliseconds, and on PostgreSQL before 18 a switched-off node adds a huge cost
 * that would trigger a compilation.
 *
 * These settings are the session's, which is why the connections are the worker's own: handlers
 * and the worker's other statements use the shared pool with the server's settings.
 *
 * They are sent with SET once the connection is open, not as the `options` startup parameter: a
 * pooler in between (PgBouncer) refuses that parameter (08P01 "unsupported startup parameter"), or,
 * told to ignore it, drops the settings without a word. Then they are read back, in a statement of
 * their own, with the backend that answered, and a connection where they did not hold, or that
 * moved to another backend, is refused with SessionSettingsError: a transaction-mode pooler can send
 * the next statement to another server connection, where none of this holds, so the worker needs a
 * session (PostgreSQL itself, or a session-mode pool). That read-back is a backstop, not the guard:
 * a quiet PgBouncer hands a client back the server connection it just released, so both
 * statements land on one backend and the check passes, while the settings stay on a connection
 * the pooler then lends to others. The worker refuses such a pooler at start instead
 * (src/db/pooler-probe.ts).
 *
 * Whatever it set, a connection resets (DISCARD ALL) before it is given up: closed with the
 * worker, or dropped after a failure. Directly on PostgreSQL the session dies with the connection
 * anyway; through a pool the server connection lives on, and a pool whose server_reset_query is
 * empty would lend it on with asynchronous commit and the planner switches still set, and with the
 * worker's named statements already prepared.
 */
export const PLANNED_SESSION_SETTINGS: Readonly<Record<string, string>> = Object.freeze({
  enable_seqscan: 'off',
  enable_bitmapscan: 'off',
  enable_sort: 'off',
  enable_incremental_sort: 'off',
  enable_hashjoin: 'off',
  enable_mergejoin: 'off',
  enable_material: 'off',
  enable_memoize: 'off',
  plan_cache_mode: 'force_generic_plan',
  synchronous_commit: 'off',
  jit: 'off',
});

/** The settings as one simple-query round trip: `set enable_seqscan = off; set …`. */
export const PLANNED_SET_STATEMENT = Object.entries(PLANNED_SESSION_SETTINGS)
  .map(([k, v]) => `set ${k} = ${v}`)
  .join('; ');

/** A planned connection's settings did not hold: it must not run the worker's statements with the server's planner. */
export class SessionSettingsError extends Error {
  constructor(readonly differences: { name: string; have: string; want: string }[]) {
    super(
      `the worker's own connection's session settings did not hold (${differences.map((d) => `${d.name} is ${d.have}, want ${d.want}`).join('; ')}): ` +
        'is a transaction-mode pooler between the worker and PostgreSQL? The worker needs a session connection: ' +
        'PostgreSQL itself or a session-mode pool (docs/scaling.md)',
    );
    this.name = 'SessionSettingsError';
  }
}

/*
 * A planned connection's own statements go unnamed, as simple queries where they take no
 * parameter: the settings are two statements in one string (a simple query alone can carry them),
 * and `discard all` drops every statement prepared on the connection, which node-postgres would
 * still believe there. Only the work sent on it is named.
 */
const SET_AND_SAY_WHERE = unnamed(`${PLANNED_SET_STATEMENT}; select pg_backend_pid() as pid`);
const READ_BACK = unnamed(
  `select name, current_setting(name) as value from unnest($1::text[]) as name
   union all select 'backend', pg_backend_pid()::text`,
);
const DISCARD_ALL = unnamed('discard all');

/**
 * Sets the planned session settings on `client` and reads them back in a second statement, with
 * the backend each ran on (so a pooler that moved the session between the two is caught too).
 * Throws SessionSettingsError when any did not hold.
 */
export async function applyPlannedSettings(client: pg.ClientBase): Promise<void> {
  const set = (await execute(client, SET_AND_SAY_WHERE, [])) as unknown as pg.QueryResult<{ pid: number }>[];
  const setOn = String(set.at(-1)!.rows[0]!.pid);
  const names = Object.keys(PLANNED_SESSION_SETTINGS);
  const rows = await run<{ name: string; value: string }>(client, READ_BACK, [names]);
  const have = new Map(rows.map((r) => [r.name, r.value]));
  const want: Record<string, string> = { ...PLANNED_SESSION_SETTINGS, backend: setOn };
  const differences = Object.keys(want)
    .filter((name) => have.get(name) !== want[name])
    .map((name) => ({ name, have: have.get(name) ?? '(missing)', want: want[name]! }));
  if (differences.length > 0) throw new SessionSettingsError(differences);
}

/** How long the reset before giving a connection up may take: a broken one fails at once, a hung one must not hold the worker. */
const RESET_TIMEOUT_MS = 2_000;

/**
 * Takes back every session setting and prepared statement of `client` (see above). False when it
 * could not: the connection is broken or hung, and its caller drops it either way.
 */
export async function resetPlannedSession(client: pg.ClientBase): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), RESET_TIMEOUT_MS)));
  try {
    return await Promise.race([
      execute(client, DISCARD_ALL, []).then(
        () => true,
        () => false,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A connection of the worker's own with these settings, opened on first use and kept while
 * the worker runs (its cached plans are the point). One connection: what runs on it runs one at a
 * time. A connection that breaks (restart, pg_terminate_backend) is replaced by the pool on the
 * next use, and the statement that saw the error fails like any other.
 *
 * The worker keeps two: the claim's (src/outbox/claim-connection.ts) and the settle connection, for the
 * batched writes of claimed rows (DONE, the lease extension, the hand-back: src/outbox/settle.ts,
 * lease.ts). Those join an array of ids to the outbox, and their one good plan is a primary-key
 * probe per id. Planned on the shared pool, with a day's statistics from before a flood (or none,
 * on a day just made), the planner took the day's PENDING rows for a handful and read all of them
 * for every id of the batch (a nested loop over the materialized array): about 2 s per 1,600-row
 * DONE batch, and a drain of 5,000 messages a second fell to 800 (ADR 0053). With these settings,
 * and a fence the planner cannot read as "few rows" (batchFence, ./lease/leased-table.ts), the
 * probes are the only plan left. On one connection the three are also one at a time, so a
 * worker's lease extension and its DONE batch never lock the same rows in opposite orders.
 */
export class PlannedConnection {
  private pool: pg.Pool | undefined;
  /** Connections of the pool whose settings were applied and checked. */
  private readonly ready = new WeakSet<pg.PoolClient>();
  /** The application's pool, whose connection options this connection copies. */
  private readonly shared: pg.Pool;

  /**
   * `applicationName` defaults to that of the shared pool with `-<role>` added
   * (stayhub-worker-claim, stayhub-worker-settle). `onOpen` sees each pool this opens, before its
   * first connection (tests record its statements).
   */
  constructor(
    db: Db,
    private readonly opts: { role: string; applicationName?: string; onOpen?: (pool: pg.Pool) => void },
  ) {
    this.shared = executorOf(db);
  }

  /**
   * Runs `work` on the connection, its settings applied and checked first. A connection that fails
   * (its settings did not hold, the statement failed, the server went away) is released with its
   * error, so the pool discards it and the next use starts on a new one.
   */
  async use<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await (this.pool ??= this.open()).connect();
    let failure: Error | undefined;
    try {
      if (!this.ready.has(client)) {
        await applyPlannedSettings(client);
        this.ready.add(client);
      }
      return await work(client);
    } catch (err) {
      failure = err instanceof Error ? err : new Error(String(err));
      await resetPlannedSession(client);
      throw err;
    } finally {
      client.release(failure);
    }
  }

  private open(): pg.Pool {
    const base = (this.shared as unknown as { options: pg.PoolConfig }).options;
    const pool = guardPool(
      new pg.Pool({
        // The same server, user, database and connection options as the pool beside it.
        ...base,
        application_name: this.opts.applicationName ?? `${base.application_name ?? 'stayhub-worker'}-${this.opts.role}`,
        max: 1,
        // Kept open while idle: an idle worker still claims every poll, and a new connection
        // would plan its statements again.
        idleTimeoutMillis: 0,
        // An idle connection does not keep the process alive (a tool that forgot close()).
        allowExitOnIdle: true,
      }),
    );
    this.opts.onOpen?.(pool);
    return pool;
  }

  /** Resets and closes the connection (a later use opens a new one). */
  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    if (!pool) return;
    if (pool.idleCount > 0) {
      const client = await pool.connect();
      const reset = await resetPlannedSession(client);
      client.release(reset ? undefined : new Error(`the ${this.opts.role} connection could not be reset`));
    }
    await pool.end();
  }
}

/**
 * EXPLAIN of a named statement as `client` runs it: the plan the connection has cached for `s` if
 * it has sent it, else `s` prepared under a name of its own with the same text, its parameters'
 * types left to PostgreSQL as node-postgres leaves them. With `analyze` the statement runs, with
 * `values`, inside a transaction that is rolled back (nothing it writes stays). EXPLAIN EXECUTE
 * takes no parameters, so the values are written into it as literals (an array as an array
 * literal, its elements as text), which PostgreSQL converts to the parameters' types. For the
 * bench's report and the plan tests.
 */
export async function explainStatement(
  client: pg.ClientBase,
  s: Statement,
  values: readonly (Scalar | readonly Scalar[])[],
  how: { analyze?: boolean; buffers?: boolean } = {},
): Promise<string> {
  const own = `${s.name}-explain`;
  const rows = await run<{ name: string }>(client, unnamed('select name from pg_prepared_statements where name = any($1)'), [
    [s.name, own],
  ]);
  const prepared = new Set(rows.map((r) => r.name));
  if (!prepared.has(s.name) && !prepared.has(own)) await execute(client, unnamed(`prepare ${pg.escapeIdentifier(own)} as ${s.text}`), []);
  const name = pg.escapeIdentifier(prepared.has(s.name) ? s.name : own);
  const options = ['costs off', how.analyze ? 'analyze' : '', how.buffers ? 'buffers' : ''].filter(Boolean).join(', ');
  await execute(client, unnamed('begin'), []);
  try {
    const plan = await run<Record<string, string>>(
      client,
      unnamed(`explain (${options}) execute ${name}(${values.map(literal).join(', ')})`),
      [],
    );
    return plan.map((r) => r['QUERY PLAN']).join('\n');
  } finally {
    await execute(client, unnamed('rollback'), []);
  }
}

type Scalar = string | number | null;
const textOf = (v: Scalar): string | null => (v === null ? null : String(v));
const literal = (v: Scalar | readonly Scalar[]): string =>
  v === null ? 'null' : pg.escapeLiteral(typeof v === 'object' ? textArray(v.map(textOf)) : String(v));
