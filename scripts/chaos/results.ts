import { execFileSync } from 'node:child_process';
import os from 'node:os';
import type { Collected } from './collect.ts';
import type { Driven } from './drive.ts';
import type { EventsFigures } from './events/observed.ts';
import type { FaultKind } from './fault-kinds.ts';
import type { InjectedFault } from './faults/types.ts';
import type { Gathered } from './gather.ts';
import type { Load } from './load.ts';
import { ROOT } from '../lib/processes.ts';
import { peak, steadyAfter, timeline, type Sample } from './sampler.ts';
import { retryWindowMs, TEMP_FAIL_RATE, WORKER_ENV } from './settings.ts';
import type { ChaosStack } from './stack.ts';
import type { ChaosVerdict } from './verdict.ts';
import type { WebhookFigures } from './webhooks.ts';
import { NATS_INSTALL_HINT } from '../lib/nats.ts';

/*
 * chaos-results.json: the verdict's checks and figures with what the run did and how the system
 * held up (drain time, the outbox's timeline, faults with their evidence), and the code that ran.
 */

export interface ChaosResults {
  ok: boolean;
  seed: number;
  durationSeconds: number;
  startedAt: string;
  wallSeconds: number;
  machine: { cpus: number; node: string };
  /** The code that ran: HEAD, and whether src/ had uncommitted changes. */
  code: { commit: string | null; srcDirty: boolean | null };
  settings: { worker: typeof WORKER_ENV; concurrency: number; tempFailRate: number; bounceRecipients: number; retryWindowSeconds: number };
  /** The events path: covered (relay into JetStream, earnings consumer, their faults and checks) or skipped, and why. */
  events: { covered: true; figures: EventsFigures | null; consumerKills: number } | { covered: false; skipped: string };
  /** Emails' pace during NATS outages against outside them (null: the events part did not run). */
  emailPace: ChaosVerdict['emailPace'];
  /** The webhook receivers: endpoints, events owed and received, requests per receiver. */
  webhooks: WebhookFigures | null;
  /** The verdict's checks: `ok` is exactly "every one of these held". */
  checks: ChaosVerdict['checks'];
  /** What the run had to contain for its checks to mean anything (scaled to the duration). */
  minimums: ChaosVerdict['minimums'];
  figures: {
    bookingsMade: number;
    bookingsInDatabase: ChaosVerdict['bookings'];
    load: Load['figures'];
    requests: number;
    clientRetries: number;
    responses: Record<string, number>;
    /** Faults with evidence of their effect, by kind (the only ones counted). */
    faults: Record<FaultKind, number>;
    faultsPlanned: Record<FaultKind, number>;
    /** Faults carried out with no effect seen (not counted). */
    faultsWithoutEffect: number;
    workerKillsMidHandlers: number;
    mail: ChaosVerdict['mail'];
    outbox: ChaosVerdict['outbox'];
    drainSecondsAfterLoad: number | null;
    secondsFromLastFaultToSteadyState: number | null;
    maxOldestPendingAgeSeconds: number;
    maxPending: number;
    /** When the oldest-pending age peaked, seconds from the start of the load. */
    maxOldestPendingAtSeconds: number | null;
    slowestMessages: Gathered['slowest'];
    /** Every 10 s of the run: PENDING count and oldest pending age (the max within the window). */
    timeline: { atSeconds: number; pending: number; oldestAgeSeconds: number }[];
    unplannedExits: Record<string, { at: string; code: number | null; signal: string | null; lastLines: string[] }[]>;
  };
  faults: Array<Omit<InjectedFault, 'startedAt' | 'endedAt'> & { atSeconds: number; seconds: number }>;
  handledTopics: string[];
}

export function gitVersion(): { commit: string | null; srcDirty: boolean | null } {
  try {
    const git = (...args: string[]) =>
      execFileSync('git', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim();
    return { commit: git('rev-parse', 'HEAD'), srcDirty: git('status', '--porcelain', '--', 'src', 'migrations') !== '' };
  } catch {
    // Not a git checkout (a `git archive` snapshot): the caller may say which commit it is.
    return { commit: process.env.CHAOS_CODE_COMMIT ?? null, srcDirty: process.env.CHAOS_CODE_COMMIT ? false : null };
  }
}

/** What the results are made of: the run's parts, what it did, what it gathered and the verdict. */
export interface RunRecord {
  seed: number;
  durationSeconds: number;
  concurrency: number;
  /** When the run started (ms epoch). */
  t0: number;
  code: ChaosResults['code'];
  stack: ChaosStack;
  driven: Driven;
  collected: Collected;
  verdict: ChaosVerdict;
  samples: Sample[];
}

const tenths = (ms: number) => Math.round(ms / 100) / 10;

function figures(r: RunRecord): ChaosResults['figures'] {
  const { driven: d, verdict, samples } = r;
  const lastFault = d.injector.lastFaultEndedAt;
  const steady = steadyAfter(samples, lastFault);
  const top = peak(samples);
  const responses: Record<string, number> = {};
  for (const [k, n] of [...d.client.counts.entries()].sort()) responses[k] = n;
  return {
    bookingsMade: d.load.figures.bookingsCreated,
    bookingsInDatabase: verdict.bookings,
    load: d.load.figures,
    requests: d.client.requests,
    clientRetries: d.client.retries,
    responses,
    faults: verdict.faults.withEvidence,
    faultsPlanned: r.collected.faultsPlanned,
    faultsWithoutEffect: verdict.faults.withoutEffect,
    workerKillsMidHandlers: d.injector.done.filter((f) => f.kind === 'worker-kill' && f.evidence && f.detail.includes('mid-handlers'))
      .length,
    mail: verdict.mail,
    outbox: verdict.outbox,
    drainSecondsAfterLoad: d.drainedAt ? tenths(d.drainedAt - d.loadEnd) : null,
    secondsFromLastFaultToSteadyState: steady && lastFault ? tenths(steady.at - lastFault) : null,
    maxOldestPendingAgeSeconds: Math.round(Math.max(0, ...samples.map((s) => s.oldestAge)) * 10) / 10,
    maxPending: Math.max(0, ...samples.map((s) => s.pending)),
    maxOldestPendingAtSeconds: top ? tenths(top.at - d.loadStart) : null,
    slowestMessages: r.collected.gathered.slowest,
    timeline: timeline(samples, d.loadStart),
    unplannedExits: Object.fromEntries(
      r.stack.unplannedExits().map(([name, exits]) => [name, exits.map((e) => ({ ...e, at: new Date(e.at).toISOString() }))]),
    ),
  };
}

export function buildResults(r: RunRecord): ChaosResults {
  const { stack, driven: d, verdict } = r;
  const ev = stack.ev;
  return {
    ok: verdict.ok,
    seed: r.seed,
    durationSeconds: r.durationSeconds,
    startedAt: new Date(r.t0).toISOString(),
    wallSeconds: Math.round((Date.now() - r.t0) / 1000),
    machine: { cpus: os.cpus().length, node: process.version },
    code: r.code,
    settings: {
      worker: WORKER_ENV,
      concurrency: r.concurrency,
      tempFailRate: TEMP_FAIL_RATE,
      bounceRecipients: stack.bounceEmails.length,
      retryWindowSeconds: Math.round(retryWindowMs() / 100) / 10,
    },
    events: ev
      ? { covered: true, figures: ev.figures ?? null, consumerKills: ev.consumerKills }
      : { covered: false, skipped: NATS_INSTALL_HINT },
    emailPace: verdict.emailPace,
    webhooks: d.hooks.figures ?? null,
    checks: verdict.checks,
    minimums: verdict.minimums,
    figures: figures(r),
    faults: d.injector.done
      .sort((a, b) => a.startedAt - b.startedAt)
      .map(({ startedAt, endedAt, ...f }) => ({
        ...f,
        atSeconds: tenths(startedAt - d.loadStart),
        seconds: tenths(endedAt - startedAt),
      })),
    handledTopics: stack.handledTopics,
  };
}
