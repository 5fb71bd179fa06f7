/*
 * What "a handler finished a message" means, over the outbox row `o`: the one definition the
 * handler-finished verbs (finished-page.ts, last-finished.ts, finished-payload-values.ts) share.
 *
 * A message counts as finished by handler H when H succeeded on it and its row is DONE:
 * - a message as written (lane null) whose handlers_done names H: H's success was recorded before
 *   DONE, so it happened at or before processed_at;
 * - a lane message of H (lanes.ts) that is DONE: H's work moved there after a failure. Its message
 *   id is its original's public id (origin_id).
 * An original whose work for H moved to a lane also names H in handlers_done, though H did nothing
 * for it: while that lane message is not DONE (PENDING or DEAD) the original is left out. Those
 * lane rows are few (live or dead ones only), each set read through its own partial index (one of
 * the PENDING ones, outbox_dead_idx).
 *
 * The callers filter `o.status = 'DONE'` and a processed_at range, so every read walks
 * outbox_done_processed_idx (DONE rows only, every partition).
 *
 * `handler` is the placeholder of the handler's name in the caller's statement (`$4`): the
 * condition is text the caller's statement is built from once, at import.
 */
export function finishedBy(handler: `$${number}`): string {
  return `(o.lane = ${handler}
       or (o.lane is null and ${handler} = any(o.handlers_done)
           and o.public_id <> all(array(
                 select p.origin_id from outbox p where p.status = 'PENDING' and p.lane = ${handler} and p.origin_id is not null
                 union all
                 select d.origin_id from outbox d where d.status = 'DEAD' and d.lane = ${handler} and d.origin_id is not null))))`;
}
