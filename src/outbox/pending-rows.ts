/*
 * The PENDING rows, read through the claim's two walks: no index holds every PENDING row and
 * nothing else (outbox_pending_created_idx did until the lean storage dropped it, ADR 0051), but
 * the two claim indexes split them without overlap on `turn`: outbox_pending_available_idx holds
 * those whose turn is null, outbox_pending_turn_idx the others. A condition of `status = 'PENDING'`
 * alone implies neither index's predicate, so it would scan every day's whole heap, the DONE
 * history with it; each branch here implies one, and PostgreSQL walks that partial index.
 *
 * `columns` and `where` are SQL text the caller's statement is built from once, at import, over
 * the alias `o`.
 */
export function pendingRows(columns: string, where = 'true'): string {
  return `(select ${columns} from outbox o where o.status = 'PENDING' and o.turn is null and (${where})
           union all
           select ${columns} from outbox o where o.status = 'PENDING' and o.turn is not null and (${where}))`;
}
