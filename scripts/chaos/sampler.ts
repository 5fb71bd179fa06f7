import type pg from 'pg';
import { pendingOfTopics } from '../../src/outbox/index.ts';

/*
 * The outbox, sampled every second during the run: how many messages of the topics the workers
 * handle are PENDING, and the age of the oldest. The results' timeline, peak and steady state
 * come from these samples.
 */

export interface Sample {
  at: number;
  pending: number;
  oldestAge: number;
}

/** Samples the outbox every second until stop(). */
export function sampleOutbox(admin: pg.Pool, topics: string[]) {
  const samples: Sample[] = [];
  const timer = setInterval(() => {
    pendingOfTopics(admin, topics)
      .then((row) => samples.push({ at: Date.now(), pending: row.pending, oldestAge: row.age ?? 0 }))
      .catch(() => {}); // Postgres restarting: no sample
  }, 1_000);
  return { samples, stop: () => clearInterval(timer) };
}

/** The samples in 10-second windows (max of each), for the results file. */
export function timeline(samples: Sample[], start: number) {
  const windows = new Map<number, { pending: number; oldestAge: number }>();
  for (const s of samples) {
    const w = Math.floor((s.at - start) / 10_000) * 10;
    const cur = windows.get(w) ?? { pending: 0, oldestAge: 0 };
    windows.set(w, { pending: Math.max(cur.pending, s.pending), oldestAge: Math.max(cur.oldestAge, s.oldestAge) });
  }
  return [...windows.entries()]
    .sort(([a], [b]) => a - b)
    .map(([atSeconds, v]) => ({ atSeconds, pending: v.pending, oldestAgeSeconds: Math.round(v.oldestAge * 10) / 10 }));
}

/** Steady state after the last fault: the first sample at which no message is older than 5 s. */
export function steadyAfter(samples: Sample[], lastFault: number | undefined): Sample | undefined {
  return lastFault ? samples.find((s) => s.at >= lastFault && s.oldestAge <= 5) : undefined;
}

/** The sample with the oldest pending message. */
export function peak(samples: Sample[]): Sample | undefined {
  return samples.reduce<Sample | undefined>((best, x) => (!best || x.oldestAge > best.oldestAge ? x : best), undefined);
}
