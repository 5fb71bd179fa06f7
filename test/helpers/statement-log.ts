import type pg from 'pg';

/** One statement a pool's client sent, in the order sent. */
export interface LoggedStatement {
  text: string;
  /** Which physical connection sent it (1, 2, … in the order the pool opened them). */
  connection: number;
  /** Position in the log's single sequence of starts and ends: comparable across connections. */
  startSeq: number;
  endSeq?: number;
  rowCount?: number | null;
  error?: string;
}

export interface StatementLog {
  readonly statements: LoggedStatement[];
  /** Statements sent but not answered yet. */
  inFlight(): number;
  /** A point in the log's sequence, to order an event of the test against the statements. */
  mark(): number;
  clear(): void;
  /** Records another pool's statements into the same log (before it opens a connection). */
  attach(pool: pg.Pool): void;
}

/**
 * Records every statement the clients of `pool` send, as the server receives them (the text, not
 * the bound values). Attach it before the pool opens its first connection: it wraps each client's
 * `query` as the pool connects it. Used to assert on what was sent and in which order (e.g. that
 * `pg_notify` is a statement of its own after COMMIT), which a listener alone cannot tell.
 */
export function recordStatements(pool: pg.Pool): StatementLog {
  const statements: LoggedStatement[] = [];
  let seq = 0;
  let connections = 0;
  const attach = (pool: pg.Pool) =>
    pool.on('connect', (client) => {
      const connection = ++connections;
      const original = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (...args: unknown[]) => {
        const first = args[0] as string | { text?: unknown } | undefined;
        const text = typeof first === 'string' ? first : first?.text;
        if (typeof text !== 'string') return original(...args);
        const entry: LoggedStatement = { text, connection, startSeq: ++seq };
        statements.push(entry);
        const done = (err: unknown, res?: { rowCount?: number | null } | { rowCount?: number | null }[]) => {
          entry.endSeq = ++seq;
          // Several statements in one query string: one result each; the last one counts.
          entry.rowCount = Array.isArray(res) ? res.at(-1)?.rowCount : res?.rowCount;
          if (err) entry.error = (err as Error).message;
        };
        // pg-pool's own pool.query passes a callback; drizzle awaits the returned promise.
        const cb = args.findIndex((a) => typeof a === 'function');
        if (cb >= 0) {
          const callback = args[cb] as (err: unknown, res: unknown) => void;
          args[cb] = (err: unknown, res: { rowCount?: number | null }) => {
            done(err, res);
            callback(err, res);
          };
          return original(...args);
        }
        const result = original(...args);
        if (result && typeof (result as Promise<unknown>).then === 'function') {
          (result as Promise<{ rowCount?: number | null }>).then(
            (res) => done(undefined, res),
            (err) => done(err),
          );
        }
        return result;
      };
    });
  attach(pool);
  return {
    statements,
    inFlight: () => statements.filter((s) => s.endSeq === undefined).length,
    mark: () => ++seq,
    clear: () => void statements.splice(0),
    attach,
  };
}
