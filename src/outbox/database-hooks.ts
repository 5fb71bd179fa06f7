import { registerAfterMigrateStep, type AfterMigrateStep } from '../db/after-migrate.ts';
import { registerRetryableWriteFault } from '../db/write-faults.ts';
import { missingOutboxDay } from './missing-day.ts';

/*
 * What the outbox asks of the database layer, which sits below it and names none of its tables:
 * withTransaction repairs a write that finds its day missing and runs it again (missing-day.ts),
 * and every migrate run makes the days ahead. Registered once per process by whatever composes
 * the application (src/process/run-main.ts for every command); idempotent.
 */

/**
 * The outbox's partitions for the week ahead, made by the database's own function
 * (outbox_ensure_partitions, migrations/0008 and 0011; partitions.ts says why) with the database's
 * clock, as the migrations leave it.
 */
const daysAhead: AfterMigrateStep = {
  name: 'outbox: the days ahead',
  run: (pool) => pool.query('select outbox_ensure_partitions()'),
};

/** Registers the outbox's retryable write fault and after-migrate step with src/db. */
export function registerOutboxHooks(): void {
  registerRetryableWriteFault(missingOutboxDay);
  registerAfterMigrateStep(daysAhead);
}
