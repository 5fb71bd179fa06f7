import type pg from 'pg';

/*
 * Work the migrate run does once the migrations are applied, still under its advisory lock,
 * provided by the modules that own what it touches (this layer names none of their tables). The
 * outbox's (src/outbox/database-hooks.ts): its day partitions for the week ahead, so every process
 * that migrates on start leaves the outbox writable whatever else runs.
 *
 * Registered once per process, where the application is composed (src/process/run-main.ts runs
 * every command; scripts that migrate outside it register before they do).
 */

export interface AfterMigrateStep {
  /** Who owns it; registering the same name again keeps the first. */
  name: string;
  run(pool: pg.Pool): Promise<unknown>;
}

const steps: AfterMigrateStep[] = [];

/** Adds `step` to what runMigrations does after migrating, in the order registered; once per name. */
export function registerAfterMigrateStep(step: AfterMigrateStep): void {
  if (!steps.some((s) => s.name === step.name)) steps.push(step);
}

/** The steps registered so far, in order. */
export function afterMigrateSteps(): readonly AfterMigrateStep[] {
  return steps;
}
