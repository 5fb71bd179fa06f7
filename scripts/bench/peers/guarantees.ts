/**
 * Each peer is measured two ways: its fastest configuration, and its configuration that keeps
 * what we keep (per-key order, a completion a stale worker cannot overwrite, the DONE history kept
 * for the retention), as far as it can. The two are different systems in the comparison
 * (lib/stats.ts compareConfigs), so each has its own strongest configuration, and the targets are
 * computed against the same-guarantee one.
 */
export const PEERS = {
  graphile: { fastest: 'graphile-worker', same: 'graphile-worker, same guarantees' },
  pgBoss: { fastest: 'pg-boss', same: 'pg-boss, same guarantees' },
} as const;

/** What each peer's same-guarantee configuration is, and, in one line, what its fastest gives up. */
export const GUARANTEES: Record<string, { same: string; fastestGivesUp: string }> = {
  [PEERS.graphile.fastest]: {
    same:
      'a job queue (`queue_name`) per key, the key as ours (unique per message, time-ordered): one job of a key at a time, in order. ' +
      'It has no configuration for the other two: its completion deletes the job by id alone (a worker whose lock was reset completes the newer attempt) and keeps no history.',
    fastestGivesUp:
      'per-key order (jobs without a queue run in any order, several at once); neither way fences its completion or keeps history.',
  },
  [PEERS.pgBoss.fastest]: {
    same:
      'a `key_strict_fifo` queue, every job with the same key as ours as its `singletonKey`; completed jobs kept `deleteAfterSeconds` = our retention (7 days); ' +
      "work()'s completion fenced on the attempt it fetched (pg-boss 12's attempt fence).",
    fastestGivesUp:
      "per-key order only: a `standard` queue fetches jobs of one key side by side; its completion is fenced and its history kept (7 days, pg-boss's default) either way.",
  },
};
