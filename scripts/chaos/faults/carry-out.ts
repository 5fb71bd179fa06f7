import { setTimeout as sleep } from 'node:timers/promises';
import type { FaultKind } from '../fault-kinds.ts';
import { poll } from '../poll.ts';
import type { ExitObserved } from '../processes.ts';
import type { FaultEffect, InjectorDeps, Killable, PlannedFault, Queryable } from './types.ts';

/*
 * How each kind of fault is carried out, and the evidence of its effect it reports: one entry a
 * kind. The events path's faults need that part of the run: without it they touch nothing and
 * report no evidence.
 */

type CarryOut = (f: PlannedFault, d: InjectorDeps) => Promise<FaultEffect>;

/** The evidence of a kill: the exit seen was by SIGKILL, the signal sent. */
const killEvidence = (seen: ExitObserved | null) => (seen && seen.signal === 'SIGKILL' ? `pid ${seen.pid} exited by SIGKILL` : null);
const killed = (seen: ExitObserved | null) => (seen ? `pid ${seen.pid}` : 'no process running');

/** SIGKILL `p`, start it again after `downMs`, and wait until it answers when `up` says how. */
async function killAndRestart(p: Killable, downMs: number, up?: () => Promise<void>): Promise<ExitObserved | null> {
  const seen = await p.kill('SIGKILL');
  await sleep(downMs);
  p.start();
  await up?.();
  return seen;
}

/** A fault of the events path; without that part, nothing is done and `none` says why. */
const onEvents =
  (none: string, carryOut: (f: PlannedFault, events: NonNullable<InjectorDeps['events']>) => Promise<FaultEffect>): CarryOut =>
  async (f, d) =>
    d.events ? carryOut(f, d.events) : { detail: `no events path in this run: ${none}`, evidence: null };

/** The postmaster's start time; asked again for a while, as the pool's connections died with the old server. */
async function postmasterStart(admin: Queryable): Promise<string | null> {
  const ask = async () => (await admin.query<{ t: string }>('select pg_postmaster_start_time()::text as t')).rows[0]?.t ?? null;
  return (await poll(ask, Date.now() + 5_000, 100)) ?? null;
}

/** PostgreSQL fast shutdown and start; the evidence is a changed postmaster start time. */
async function pgRestart(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  const before = await postmasterStart(d.admin);
  const t0 = Date.now();
  await d.postgres.stop(); // fast shutdown: SIGINT to the postmaster
  const stopped = Date.now() - t0;
  await sleep(f.downMs);
  await d.postgres.start();
  const after = await postmasterStart(d.admin);
  const changed = before !== null && after !== null && before !== after;
  return {
    detail: `Postgres fast shutdown (${stopped} ms) and start; down ${Date.now() - t0} ms in all; postmaster started ${before} → ${after}`,
    evidence: changed ? `pg_postmaster_start_time() ${before} → ${after}` : null,
  };
}

/** pg_terminate_backend on the workers' connections; the evidence is backends that really ended. */
async function pgTerminateWorkers(_f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  // Right after a restart or a worker kill there may be no worker connection yet: wait
  // (bounded) for one, so the fault severs live connections rather than nothing.
  const live = `select count(*)::int as n from pg_stat_activity where application_name like 'stayhub-worker%'`;
  await poll(
    async () => ((await d.admin.query<{ n: number }>(live)).rows[0]?.n ? true : undefined),
    Date.now() + (d.connectionWaitMs ?? 10_000),
    100,
  );
  const { rows } = await d.admin.query<{ pid: number; name: string }>(
    // Materialized first, so pg_terminate_backend is only ever called on the workers' backends.
    `with w as materialized (
         select pid, application_name from pg_stat_activity
          where application_name like 'stayhub-worker%' and pid <> pg_backend_pid())
       select pid, application_name as name from w where pg_terminate_backend(pid)`,
  );
  // pg_terminate_backend only sends the signal: count the backends that are really gone.
  const pids = rows.map((r) => r.pid);
  let left = pids;
  const gone = async () => {
    left = (await d.admin.query<{ pid: number }>('select pid from pg_stat_activity where pid = any($1::int[])', [left])).rows.map(
      (r) => r.pid,
    );
    return left.length === 0 || undefined;
  };
  if (pids.length) await poll(gone, Date.now() + (d.backendGoneTimeoutMs ?? 3_000), 50);
  const ended = pids.length - left.length;
  const names = [...new Set(rows.map((r) => r.name))].join(',') || 'none';
  return {
    detail: `pg_terminate_backend on ${pids.length} worker connection(s) (${names}); ${ended} ended`,
    evidence: ended > 0 ? `${ended} backend(s) ended: pids ${pids.filter((p) => !left.includes(p)).join(', ')}` : null,
  };
}

/**
 * One NATS node SIGKILLed and started again on its store (nats-node-kill) or with its store wiped
 * (nats-node-wipe), the stream's or the group's leader when `leader`; the evidence includes the
 * node being current again.
 */
const natsNodeKillOrWipe = onEvents('no NATS node to hit', async (f, events) => {
  const target = { leader: f.leader ?? false, index: f.node ?? 0 };
  const wipe = f.kind === 'nats-node-wipe';
  const seen = wipe ? await events.wipeNatsNode(target) : await events.killNatsNode(target, f.downMs);
  const who = `${seen.node}${seen.wasLeader ? (wipe ? ' (the earnings group leader)' : ' (the stream leader)') : ''}`;
  const exit = seen.seen ? `pid ${seen.seen.pid} exited ${seen.seen.signal ?? `with code ${seen.seen.code}`}` : 'not running';
  const back =
    seen.caughtUpAfterMs === null ? 'NOT current again within the bound' : `current again ${seen.caughtUpAfterMs} ms after its start`;
  const detail = wipe
    ? `NATS node ${who} SIGKILLed (${exit}), store ${seen.wiped ? 'wiped' : 'NOT wiped'}, started empty; ${back}`
    : `NATS node ${who} SIGKILLed (${exit}), started again on its store after ${f.downMs} ms; ${back}`;
  const ok = killEvidence(seen.seen) !== null && seen.caughtUpAfterMs !== null && (!wipe || seen.wiped);
  return {
    detail,
    evidence: ok ? `${seen.node}: pid ${seen.seen!.pid} exited by SIGKILL${wipe ? ', store removed' : ''}, current again` : null,
  };
});

export const CARRY_OUT: Record<FaultKind, CarryOut> = {
  /** SIGKILL one worker, mid-handlers when it can (it just finished a handler), and start it again after `downMs`. */
  'worker-kill': async (f, d) => {
    const i = f.worker ?? 0;
    // Mid-handlers: wait (up to 3 s) until this worker has just finished a handler, i.e. it is
    // working through a batch and the next handlers are running.
    const deadline = Date.now() + 3_000;
    while (Date.now() - d.lastWorkerActivity[i]! > 150 && Date.now() < deadline) await sleep(20);
    const busy = Date.now() - d.lastWorkerActivity[i]! <= 150;
    const seen = await killAndRestart(d.workers[i]!, f.downMs);
    return {
      detail: `SIGKILL worker ${i} (${killed(seen)}) ${busy ? 'mid-handlers' : 'while idle'}, down ${f.downMs} ms`,
      evidence: killEvidence(seen),
    };
  },
  /** SIGKILL the API, start it again after `downMs`, wait until it answers. */
  'api-kill': async (f, d) => {
    const seen = await killAndRestart(d.api, f.downMs, () => d.waitApiUp());
    return { detail: `SIGKILL API (${killed(seen)}), down ${f.downMs} ms before restart`, evidence: killEvidence(seen) };
  },
  /** SIGKILL the SMTP server, start it again after `downMs`, wait until it listens. */
  'smtp-outage': async (f, d) => {
    const seen = await killAndRestart(d.smtp, f.downMs, () => d.waitSmtpUp());
    return { detail: `SMTP server killed (${killed(seen)}), restarted after ${f.downMs} ms`, evidence: killEvidence(seen) };
  },
  'pg-restart': pgRestart,
  'pg-terminate-workers': pgTerminateWorkers,
  /** SIGKILL the earnings consumer (events/consumer.ts), down `downMs`. */
  'consumer-kill': onEvents('nothing to kill', async (f, events) => {
    const { seen, consuming } = await events.killConsumer(f.downMs);
    return {
      detail: `SIGKILL earnings consumer (${killed(seen)}) ${consuming ? 'while pulling from its group' : 'while starting'}, down ${f.downMs} ms`,
      evidence: killEvidence(seen),
    };
  }),
  /** Every NATS node down for `downMs`, then back on the same stores (events/node-faults.ts). */
  'nats-outage': onEvents('no nats-server to stop', async (f, events) => {
    const seen = await events.natsOutage(f.downMs);
    const how = seen.stopped
      ? `pid ${seen.stopped.pid} exited ${seen.stopped.signal ?? `with code ${seen.stopped.code}`}`
      : 'no server running';
    return {
      detail: `nats-server stopped (SIGTERM; ${how}), port ${seen.refusedWhileDown ? 'refused' : 'still accepted'} connections, started again on the same store after ${f.downMs} ms${seen.restartedPid ? ` (pid ${seen.restartedPid})` : ''}`,
      evidence:
        seen.stopped && seen.refusedWhileDown && seen.restartedPid !== null
          ? `nats-server pid ${seen.stopped.pid} exit seen, its port refused connections, pid ${seen.restartedPid} listening again`
          : null,
    };
  }),
  /** Delete the events stream under the relay and the consumer; the evidence is its recreation. */
  'stream-delete': onEvents('no stream to delete', async (_f, events) => {
    const seen = await events.deleteStream();
    const back = seen.createdAfter
      ? `recreated (created ${seen.createdAfter}${seen.groupBack ? ', with the group durable on it' : ', the group durable NOT back'}${seen.backAfterMs === null ? '' : ` ${seen.backAfterMs} ms after the delete`})`
      : 'NOT recreated within the bound';
    return {
      detail: seen.createdBefore
        ? `events stream (created ${seen.createdBefore}, ${seen.messagesBefore} messages) deleted${seen.deleted ? '' : ' (the server said no)'}; ${back}`
        : 'no events stream to delete',
      evidence:
        seen.deleted && seen.createdBefore && seen.createdAfter && seen.createdAfter !== seen.createdBefore
          ? `stream created ${seen.createdBefore} before, ${seen.createdAfter} after`
          : null,
    };
  }),
  /** Publish a forged booking.created on the stream (events/forge.ts); the evidence is the PubAck. */
  'forged-event': onEvents('nowhere to publish', async (f, events) => {
    const seen = await events.forgeEvent(f.forgery ?? 'unknown-booking', f.pick ?? 0);
    const e = seen.forged;
    if (!e) return { detail: `forged booking.created (${f.forgery}) not published: ${seen.failed}`, evidence: null };
    const refused =
      seen.deadLetteredAfterMs === null
        ? 'not dead-lettered within the wait'
        : `dead-lettered ${seen.deadLetteredAfterMs} ms later: ${seen.lastError?.slice(0, 160)}`;
    return {
      detail: `forged booking.created ${e.messageId} (${e.kind}: booking ${e.bookingId}, property ${e.propertyId}, total ${e.total}${e.realTotal === null ? '' : ` for a real ${e.realTotal}`}) published; ${refused}`,
      evidence: `PubAck seq ${e.seq}`,
    };
  }),
  'nats-node-kill': natsNodeKillOrWipe,
  'nats-node-wipe': natsNodeKillOrWipe,
};
