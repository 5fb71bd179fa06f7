import { registerAfterMigrateStep, type AfterMigrateStep } from '../db/after-migrate.ts';
import { registerRetryableWriteFault } from '../db/write-faults.ts';
import { migrateOutbox } from './migrate.ts';
import { missingOutboxDay } from './missing-day.ts';

/*
 * What the outbox asks of the database layer, which sits below it and names none of its tables:
 * withTransaction repairs a write that finds its day missing and runs it again (missing-day.ts),
 * and every migrate run brings the outbox's storage up to this code and makes the days ahead. Registered once per process by whatever composes
 * the application (src/process/run-main.ts for every command); idempotent.
 */

/**
 * The outbox's own migrations (migrate.ts), after the application's, which made its tables until
 * it owned them; then its partitions for the week ahead, made by the database's own function with
 * the database's clock (partitions.ts says why).
 */
const storage: AfterMigrateStep = {
  name: 'outbox: its migrations and the days ahead',
  run: (pool) => migrateOutbox(pool),
};

/** Registers the outbox's retryable write fault and after-migrate step with src/db. */
export function registerOutboxHooks(): void {
  registerRetryableWriteFault(missingOutboxDay);
  registerAfterMigrateStep(storage);
}
