import type { Db } from './client.ts';

/*
 * Faults a write can repair and then run again, named by the modules that own them, not by this
 * layer: the database layer knows none of the tables above it. withTransaction (transaction.ts)
 * asks each registered fault whether it recognises an error; if one does, the fault repairs what
 * was missing and the transaction, rolled back whole by the error, runs again from the start.
 *
 * Registered once per process, where the application is composed (src/process/run-main.ts runs
 * every command; tests register in their database helper). The outbox's (src/outbox/missing-day.ts):
 * a write that finds no partition for its day.
 */

export interface RetryableWriteFault {
  /** Who owns it; registering the same name again keeps the first. */
  name: string;
  /** True for an error this fault knows how to repair. */
  recognises(err: unknown): boolean;
  /** Makes the write possible again; an error it throws surfaces in place of the write's. */
  repair(db: Db): Promise<unknown>;
}

const faults: RetryableWriteFault[] = [];

/** Adds `fault` to those withTransaction repairs; once per name. */
export function registerRetryableWriteFault(fault: RetryableWriteFault): void {
  if (!faults.some((f) => f.name === fault.name)) faults.push(fault);
}

/** The registered fault that recognises `err`, if any. */
export function retryableWriteFault(err: unknown): RetryableWriteFault | undefined {
  return faults.find((f) => f.recognises(err));
}
