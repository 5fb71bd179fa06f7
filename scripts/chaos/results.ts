import { execFileSync } from 'node:child_process';
import os from 'node:os';
import type { collect } from './collect.ts';
import type { Driven } from './drive.ts';
import type { Flags } from './flags.ts';
import { ROOT } from '../lib/processes.ts';
import { peak, steadyAfter, timeline, type Sample } from './sampler.ts';
import { retryWindowMs, TEMP_FAIL_RATE, WORKER_ENV } from './settings.ts';
import type { ChaosStack } from './stack.ts';
import type { ChaosVerdict } from './verdict.ts';
import { NATS_INSTALL_HINT } from '../lib/nats.ts';

/*
 * chaos-results.json: the verdict's checks and figures with what the run did and how the system
 * held up (drain time, the outbox's timeline, faults with their evidence), and the code that ran.
 * Its shape is what buildResults() makes (ChaosResults).
 */

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

/** What the results are made of: the run's flags, what it did, what it gathered and the verdict; t0: when it started (ms epoch). */
type RunRecord = Pick<Flags, 'seed' | 'durationSeconds' | 'concurrency' | 'outboxWrites'> & {
  t0: number;
  code: ReturnType<typeof gitVersion>;
  stack: ChaosStack;
  driven: Driven;
  collected: Awaited<ReturnType<typeof collect>>;
  verdict: ChaosVerdict;
  samples: Sample[];
};

const tenths = (ms: number) => Math.round(ms / 100) / 10;

function figures(r: RunRecord) {
  const { driven: d, verdict, samples } = r;
  const lastFault = d.injector.lastFaultEndedAt;
  const steady = steadyAfter(samples, lastFault);
  const top = peak(samples);
  return {
    bookingsMade: d.load.figures.bookingsCreated,
    bookingsInDatabase: verdict.bookings,
    load: d.load.figures,
    /** Requests sent, client retries included. */
    requests: d.client.requests,
    clientRetries: d.client.retries,
    responses: Object.fromEntries([...d.client.counts.entries()].sort()),
    /** Faults with evidence of their effect, by kind (the only ones counted). */
    faults: verdict.faults.withEvidence,
    faultsPlanned: r.collected.input.faultsPlanned,
    /** Faults carried out with no effect seen (not counted). */
    faultsWithoutEffect: verdict.faults.withoutEffect,
    workerKillsMidHandlers: d.injector.done.filter((f) => f.kind === 'worker-kill' && f.evidence && f.detail.includes('mid-handlers'))
      .length,
    mail: verdict.mail,
    outbox: verdict.outbox,
    drainSecondsAfterLoad: d.drainedAt ? tenths(d.drainedAt - d.loadEnd) : null,
    secondsFromLastFaultToSteadyState: steady && lastFault ? tenths(steady.at - lastFault) : null,
    maxOldestPendingAgeSeconds: Math.round(Math.max(0, ...samples.map((s) => s.oldestAge)) * 10) / 10,
    maxPending: Math.max(0, ...samples.map((s) => s.pending)),
    /** When the oldest-pending age peaked, seconds from the start of the load. */
    maxOldestPendingAtSeconds: top ? tenths(top.at - d.loadStart) : null,
    slowestMessages: r.collected.gathered.slowest,
    /** Every 10 s of the run: PENDING count and oldest pending age (the max within the window). */
    timeline: timeline(samples, d.loadStart),
    unplannedExits: Object.fromEntries(
      r.stack.unplannedExits().map(([name, exits]) => [name, exits.map((e) => ({ ...e, at: new Date(e.at).toISOString() }))]),
    ),
  };
}

export function buildResults(r: RunRecord) {
  const { stack, driven: d, verdict } = r;
  const ev = stack.ev;
  return {
    /** Exactly "every one of the checks held". */
    ok: verdict.ok,
    seed: r.seed,
    durationSeconds: r.durationSeconds,
    startedAt: new Date(r.t0).toISOString(),
    wallSeconds: Math.round((Date.now() - r.t0) / 1000),
    machine: { cpus: os.cpus().length, node: process.version },
    /** The code that ran: HEAD, and whether src/ had uncommitted changes. */
    code: r.code,
    settings: {
      /** The API's OUTBOX_WRITES: messages as rows, or to the WAL for the workers to make rows of. */
      outboxWrites: r.outboxWrites,
      worker: WORKER_ENV,
      concurrency: r.concurrency,
      tempFailRate: TEMP_FAIL_RATE,
      bounceRecipients: stack.bounceEmails.length,
      retryWindowSeconds: Math.round(retryWindowMs() / 100) / 10,
    },
    /** The events path: covered (relay into JetStream, earnings consumer, their faults and checks) or skipped, and why. */
    events: ev
      ? { covered: true as const, figures: ev.figures ?? null, consumerKills: ev.consumerKills }
      : { covered: false as const, skipped: NATS_INSTALL_HINT },
    /** Emails' pace during NATS outages against outside them (null: the events part did not run). */
    emailPace: verdict.emailPace,
    /** The webhook receivers: endpoints, events owed and received, requests per receiver. */
    webhooks: d.hooks.figures ?? null,
    checks: verdict.checks,
    /** What the run had to contain for its checks to mean anything (scaled to the duration). */
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

export type ChaosResults = ReturnType<typeof buildResults>;
