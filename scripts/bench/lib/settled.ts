import pg from 'pg';
import { nowMs } from './marks.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { OURS_PENDING_SQL } from './outbox.ts';

/**
 * The end of every drain's clock, the same for every system: the moment one observer, polling
 * every `pollMs` on a connection of its own, first sees no job of the run left unsettled (ours:
 * no PENDING outbox row; graphile-worker: no row in its jobs table, which it deletes on
 * completion; pg-boss: no job of the queue not 'completed'). A process exit would be a different
 * end for an in-process runner (pg-boss); a handler's return would not count the completion
 * write. The poll costs each system the same: one EXISTS every 10 ms (±10 ms on a drain of
 * seconds, a few per cent of one core).
 */
export interface SettleWatch {
  /** Resolves with the moment (lib/marks.ts clock) nothing was pending any more. */
  settled: Promise<number>;
  stop(): Promise<void>;
}

export function watchSettled(
  url: string,
  pendingSql: string,
  values: unknown[] = [],
  /** `after`: poll only once it resolves (a burst's COMMIT), on a connection opened beforehand. */
  opts: { pollMs?: number; timeoutMs?: number; after?: Promise<unknown> } = {},
): SettleWatch {
  const client = new pg.Client({ connectionString: url, application_name: 'bench-settle-watch' });
  let stopped = false;
  const settled = (async () => {
    await client.connect();
    await opts.after;
    const deadline = Date.now() + (opts.timeoutMs ?? 600_000);
    while (!stopped) {
      const { rows } = await client.query<{ pending: boolean }>(`select exists(${pendingSql}) as pending`, values);
      const at = nowMs();
      if (!rows[0]!.pending) return at;
      if (Date.now() > deadline) throw new Error(`still pending after ${opts.timeoutMs ?? 600_000} ms: ${pendingSql}`);
      await sleep(opts.pollMs ?? 10);
    }
    throw new Error('stopped before settled');
  })();
  settled.catch(() => {}); // observed by the caller; never an unhandled rejection
  return {
    settled,
    async stop() {
      stopped = true;
      await settled.catch(() => {});
      await client.end().catch(() => {});
    },
  };
}

/** What "pending" means for each system (see watchSettled). */
export const PENDING = {
  ours: OURS_PENDING_SQL,
  graphile: 'select 1 from graphile_worker._private_jobs',
  pgBoss: `select 1 from pgboss.job where name = $1 and state <> 'completed'`,
} as const;
