-- The lean storage's first cut (ADR 0051): the PENDING rows' created_at index goes, one index entry
-- less for every message written. The queue's depth and the age of its oldest message are read
-- through the claim's two partial indexes instead, which split the PENDING rows on `turn` without
-- overlap (src/outbox/pending-rows.ts).
--
-- A process of the release before, running beside this one during the upgrade, still asks for
-- `status = 'PENDING'` alone (its stats, its depth history, the API's admission sample): without
-- this index those queries scan the days' heaps instead. They stay correct, only slower, until
-- that release is gone; nothing of it writes through the index or depends on its order.
--
-- Dropping an index of the partitioned table locks the outbox and every day of it for a moment: a
-- lock queued behind a long transaction would hold up every booking behind it, so the wait is
-- bounded, and a migration that cannot have its lock fails (nothing done) and runs at the next start.
SET LOCAL lock_timeout = '5s';
DROP INDEX IF EXISTS outbox_pending_created_idx;
