import { pendingRows } from './pending-rows.ts';

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
 * lane rows are few (live or dead ones only), each set read through its own partial indexes (the
 * claim's two for the PENDING ones, pending-rows.ts; outbox_dead_idx).
 *
 * The callers filter `o.status = 'DONE'` and a processed_at range, so every read goes through
 * the BRIN index of DONE rows' processed_at (outbox_done_processed_brin), day by day where an order
 * is needed (finished-page.ts).
 *
 * `handler` is the placeholder of the handler's name in the caller's statement (`$4`): the
 * condition is text the caller's statement is built from once, at import.
 */
export function finishedBy(handler: `$${number}`): string {
  return `(o.lane = ${handler}
       or (o.lane is null and ${handler} = any(o.handlers_done)
           and o.public_id <> all(array(
                 select p.origin_id from ${pendingRows('o.origin_id', `o.lane = ${handler} and o.origin_id is not null`)} as p
                 union all
                 select d.origin_id from outbox d where d.status = 'DEAD' and d.lane = ${handler} and d.origin_id is not null))))`;
}
