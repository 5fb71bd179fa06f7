import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type {
  ForgedEventObserved,
  NatsNodeObserved,
  NatsOutageObserved,
  StreamDeleteObserved,
} from '../../../scripts/chaos/events/observed.ts';
import { FaultInjector } from '../../../scripts/chaos/faults/injector.ts';
import { ISOLATING_RUN_MS, planFaults } from '../../../scripts/chaos/faults/plan.ts';
import type { InjectorDeps, Killable, PlannedFault } from '../../../scripts/chaos/faults/types.ts';
import { EVENT_FAULT_KINDS } from '../../../scripts/chaos/fault-kinds.ts';
import { Supervised, type ExitObserved } from '../../../scripts/chaos/processes.ts';
import { Rng } from '../../../scripts/chaos/rng.ts';

/*
 * The fault injector counts a fault only with evidence of its effect, and never runs two faults
 * on one target at once. Fed fakes whose effect the test decides; the supervisor's kill is
 * checked on a real child process.
 */

const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-chaos-faults-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A process that is running (kill observes its exit by SIGKILL) or not (kill finds nothing). */
function fakeProcess(running: boolean): Killable & { kills: number; intervals: [number, number][] } {
  let downSince = 0;
  let pid = 100;
  const p = {
    kills: 0,
    intervals: [] as [number, number][],
    async kill(): Promise<ExitObserved | null> {
      p.kills++;
      if (!running) return null;
      running = false;
      downSince = Date.now();
      return { pid: pid++, code: null, signal: 'SIGKILL' };
    },
    start() {
      if (!running) p.intervals.push([downSince, Date.now()]);
      running = true;
    },
  };
  return p;
}

function deps(over: Partial<InjectorDeps> = {}): InjectorDeps & { lines: string[] } {
  const lines: string[] = [];
  return {
    workers: [fakeProcess(true), fakeProcess(true)],
    api: fakeProcess(true),
    smtp: fakeProcess(true),
    postgres: { stop: async () => {}, start: async () => {} },
    admin: { query: async () => ({ rows: [] }) },
    lastWorkerActivity: [Date.now() + 60_000, Date.now() + 60_000], // "busy": no wait before a kill
    waitApiUp: async () => {},
    waitSmtpUp: async () => {},
    log: (l) => lines.push(l),
    backendGoneTimeoutMs: 200,
    connectionWaitMs: 200,
    lines,
    ...over,
  };
}

/** An events path whose NATS outages last their `downMs` and whose consumer kills succeed; nothing else is planned. */
function outagesAndConsumerKills(): InjectorDeps['events'] {
  return {
    killConsumer: async () => ({ seen: { pid: 5, code: null, signal: 'SIGKILL' }, consuming: true }),
    natsOutage: async (ms) => {
      await new Promise((r) => setTimeout(r, ms));
      return { stopped: { pid: 7, code: 0, signal: null }, refusedWhileDown: true, restartedPid: 8 };
    },
    deleteStream: () => Promise.reject(new Error('not planned here')),
    forgeEvent: () => Promise.reject(new Error('not planned here')),
    killNatsNode: () => Promise.reject(new Error('not planned here')),
    wipeNatsNode: () => Promise.reject(new Error('not planned here')),
  };
}

/*
 * The downstreams' gap, the turn and the quiet are judged by when faults start, so their times
 * are a few hundred ms apart: wide enough that a loaded machine's timer lag (tens of ms) cannot
 * reorder them.
 */
const GAP = 400;
const QUIET = 400;

async function inject(d: InjectorDeps, plan: PlannedFault[]) {
  const injector = new FaultInjector(d);
  injector.start(plan);
  await new Promise((r) => setTimeout(r, Math.max(...plan.map((f) => f.at)) + 20));
  await injector.settle();
  return injector.done;
}

describe('fault evidence', () => {
  it('a kill that found a running process counts; one that found nothing does not', async () => {
    const d = deps({ workers: [fakeProcess(true), fakeProcess(false)] });
    const done = await inject(d, [
      { kind: 'worker-kill', at: 0, downMs: 10, worker: 0 },
      { kind: 'worker-kill', at: 0, downMs: 10, worker: 1 },
    ]);
    const byWorker = Object.fromEntries(done.map((f) => [f.target, f.evidence]));
    expect(byWorker['worker-0']).toMatch(/exited by SIGKILL/);
    expect(byWorker['worker-1']).toBeNull();
    expect(d.lines.some((l) => l.includes('NO EFFECT SEEN'))).toBe(true);
  });

  it('pg_terminate_backend counts only backends that really ended, and only when there was one', async () => {
    const none = await inject(deps(), [{ kind: 'pg-terminate-workers', at: 0, downMs: 0 }]);
    expect(none[0]!.evidence).toBeNull();

    let polls = 0;
    const admin = {
      query: async (text: string) => {
        if (text.includes('pg_terminate_backend'))
          return {
            rows: [
              { pid: 11, name: 'stayhub-worker' },
              { pid: 12, name: 'stayhub-worker-listen' },
            ],
          };
        // The first poll still sees 12 (the signal was sent, the backend not yet gone).
        return { rows: polls++ === 0 ? [{ pid: 12 }] : [] };
      },
    };
    const ended = await inject(deps({ admin: admin as never }), [{ kind: 'pg-terminate-workers', at: 0, downMs: 0 }]);
    expect(ended[0]!.evidence).toMatch(/2 backend\(s\) ended/);

    const stuck = {
      query: async (text: string) => ({
        rows: text.includes('pg_terminate_backend') ? [{ pid: 13, name: 'stayhub-worker' }] : [{ pid: 13 }],
      }),
    };
    const notEnded = await inject(deps({ admin: stuck as never }), [{ kind: 'pg-terminate-workers', at: 0, downMs: 0 }]);
    expect(notEnded[0]!.evidence).toBeNull();
  });

  it('a Postgres restart counts only when pg_postmaster_start_time() changed', async () => {
    const startTime = (changes: boolean) => {
      let t = 0;
      return {
        postgres: { stop: async () => {}, start: async () => void (changes && t++) },
        admin: { query: async () => ({ rows: [{ t: `2026-11-30 23:00:0${t}+00` }] }) } as never,
      };
    };
    const same = await inject(deps(startTime(false)), [{ kind: 'pg-restart', at: 0, downMs: 0 }]);
    expect(same[0]!.evidence).toBeNull();
    const restarted = await inject(deps(startTime(true)), [{ kind: 'pg-restart', at: 0, downMs: 0 }]);
    expect(restarted[0]!.evidence).toMatch(/23:00:00.*→.*23:00:01/);
  });
});

describe('fault evidence: the events path', () => {
  const outage = (o: Partial<NatsOutageObserved>): NatsOutageObserved => ({
    stopped: { pid: 7, code: 0, signal: null },
    refusedWhileDown: true,
    restartedPid: 8,
    ...o,
  });
  const deletion = (o: Partial<StreamDeleteObserved>): StreamDeleteObserved => ({
    createdBefore: '2027-01-01T10:00:00.000Z',
    messagesBefore: 40,
    deleted: true,
    createdAfter: '2027-01-01T10:00:02.100Z',
    backAfterMs: 2_100,
    groupBack: true,
    ...o,
  });
  const forgery = (o: Partial<ForgedEventObserved>): ForgedEventObserved => ({
    forged: {
      kind: 'wrong-amount',
      messageId: 'm-1',
      bookingId: 'b-1',
      propertyId: 'p-1',
      total: 25_000,
      realTotal: 20_000,
      currency: 'EUR',
      seq: 17,
      publishedAt: 0,
    },
    deadLetteredAfterMs: 40,
    lastError: 'PermanentError: earnings: booking.created for booking b-1 refused: …',
    ...o,
  });
  const node = (o: Partial<NatsNodeObserved>): NatsNodeObserved => ({
    node: 'n2',
    wasLeader: true,
    seen: { pid: 9, code: null, signal: 'SIGKILL' },
    wiped: false,
    caughtUpAfterMs: 1_200,
    ...o,
  });
  const events = (
    kill: ExitObserved | null,
    nats: NatsOutageObserved,
    deleted: StreamDeleteObserved = deletion({}),
    forged: ForgedEventObserved = forgery({}),
    hit: NatsNodeObserved = node({}),
  ) => ({
    killConsumer: async () => ({ seen: kill, consuming: true }),
    natsOutage: async () => nats,
    deleteStream: async () => deleted,
    forgeEvent: async () => forged,
    killNatsNode: async () => hit,
    wipeNatsNode: async () => hit,
  });

  it('a NATS node kill counts only with its exit by SIGKILL seen and the node current again', async () => {
    const kill = (o: Partial<NatsNodeObserved>) =>
      inject(deps({ events: events(null, outage({}), deletion({}), forgery({}), node(o)) }), [
        { kind: 'nats-node-kill', at: 0, downMs: 10, leader: true, node: 1 },
      ]);
    const seen = await kill({});
    expect(seen[0]).toMatchObject({ target: 'nats', evidence: 'n2: pid 9 exited by SIGKILL, current again' });
    expect(seen[0]!.detail).toMatch(/n2 \(the stream leader\) SIGKILLed .*current again 1200 ms after its start/);
    expect((await kill({ seen: null }))[0]!.evidence).toBeNull();
    expect((await kill({ seen: { pid: 9, code: 0, signal: null } }))[0]!.evidence).toBeNull();
    expect((await kill({ caughtUpAfterMs: null }))[0]!.evidence).toBeNull();
    expect((await inject(deps(), [{ kind: 'nats-node-kill', at: 0, downMs: 10 }]))[0]!.evidence).toBeNull();
  });

  it('a NATS node wipe counts only with its store removed, as well as the kill seen and the node current again', async () => {
    const wipe = (o: Partial<NatsNodeObserved>) =>
      inject(deps({ events: events(null, outage({}), deletion({}), forgery({}), node({ wiped: true, ...o })) }), [
        { kind: 'nats-node-wipe', at: 0, downMs: 0, leader: true, node: 0 },
      ]);
    const seen = await wipe({});
    expect(seen[0]).toMatchObject({ target: 'nats', evidence: 'n2: pid 9 exited by SIGKILL, store removed, current again' });
    expect(seen[0]!.detail).toMatch(/n2 \(the earnings group leader\) SIGKILLed .*store wiped, started empty/);
    expect((await wipe({ wiped: false }))[0]!.evidence).toBeNull();
    expect((await wipe({ caughtUpAfterMs: null }))[0]!.evidence).toBeNull();
    expect((await wipe({ seen: null }))[0]!.evidence).toBeNull();
  });

  it('a consumer kill counts only when the consumer was running and exited by SIGKILL', async () => {
    const killed = await inject(deps({ events: events({ pid: 5, code: null, signal: 'SIGKILL' }, outage({})) }), [
      { kind: 'consumer-kill', at: 0, downMs: 10 },
    ]);
    expect(killed[0]).toMatchObject({ target: 'earnings-consumer', evidence: 'pid 5 exited by SIGKILL' });
    const nothing = await inject(deps({ events: events(null, outage({})) }), [{ kind: 'consumer-kill', at: 0, downMs: 10 }]);
    expect(nothing[0]!.evidence).toBeNull();
    // A run without the events path has nothing to kill: planned by mistake, never counted.
    const noEvents = await inject(deps(), [{ kind: 'consumer-kill', at: 0, downMs: 10 }]);
    expect(noEvents[0]!.evidence).toBeNull();
  });

  it("a NATS outage counts only with the server's exit seen, its port refusing, and a server back", async () => {
    const nats = (o: Partial<NatsOutageObserved>) =>
      inject(deps({ events: events(null, outage(o)) }), [{ kind: 'nats-outage', at: 0, downMs: 10 }]);
    const seen = await nats({});
    expect(seen[0]).toMatchObject({ target: 'nats' });
    expect(seen[0]!.evidence).toMatch(/pid 7 exit seen, its port refused connections, pid 8 listening again/);
    expect((await nats({ stopped: null }))[0]!.evidence).toBeNull();
    expect((await nats({ refusedWhileDown: false }))[0]!.evidence).toBeNull();
    expect((await nats({ restartedPid: null }))[0]!.evidence).toBeNull();
    expect((await inject(deps(), [{ kind: 'nats-outage', at: 0, downMs: 10 }]))[0]!.evidence).toBeNull();
  });

  it('a stream deletion counts only when the stream came back with another creation time', async () => {
    const del = (o: Partial<StreamDeleteObserved>) =>
      inject(deps({ events: events(null, outage({}), deletion(o)) }), [{ kind: 'stream-delete', at: 0, downMs: 0 }]);
    const seen = await del({});
    expect(seen[0]).toMatchObject({ target: 'events stream' });
    expect(seen[0]!.evidence).toBe('stream created 2027-01-01T10:00:00.000Z before, 2027-01-01T10:00:02.100Z after');
    expect((await del({ createdAfter: null, backAfterMs: null }))[0]!.evidence).toBeNull();
    expect((await del({ deleted: false }))[0]!.evidence).toBeNull();
    // Info after the delete that still names the old stream: not recreated.
    expect((await del({ createdAfter: '2027-01-01T10:00:00.000Z' }))[0]!.evidence).toBeNull();
    expect((await del({ createdBefore: null }))[0]!.evidence).toBeNull();
    expect((await inject(deps(), [{ kind: 'stream-delete', at: 0, downMs: 0 }]))[0]!.evidence).toBeNull();
  });

  it("a forged event counts on the stream's PubAck, refused or not yet (the verdict judges the refusal)", async () => {
    const forge = (o: Partial<ForgedEventObserved>) =>
      inject(deps({ events: events(null, outage({}), deletion({}), forgery(o)) }), [
        { kind: 'forged-event', at: 0, downMs: 0, forgery: 'wrong-amount', pick: 0.5 },
      ]);
    const seen = await forge({});
    expect(seen[0]).toMatchObject({ target: 'events stream', evidence: 'PubAck seq 17' });
    expect(seen[0]!.detail).toMatch(/wrong-amount.*total 25000 for a real 20000.*dead-lettered 40 ms later/);
    expect((await forge({ deadLetteredAfterMs: null, lastError: null }))[0]!.evidence).toBe('PubAck seq 17');
    expect((await forge({ forged: null, failed: 'publish: TIMEOUT' }))[0]!.evidence).toBeNull();
  });

  it('isolates one NATS outage in three, the first included, in runs long enough for the quiet around them', () => {
    const o = { workers: 2, maxSmtpOutageMs: 4_250, events: { maxNatsOutageMs: 4_250 } };
    const long = planFaults(new Rng(7), { ...o, durationMs: 600_000 }).filter((f) => f.kind === 'nats-outage');
    expect(long).toHaveLength(7);
    expect(long.filter((f) => f.isolated)).toHaveLength(3);
    const short = planFaults(new Rng(7), { ...o, durationMs: ISOLATING_RUN_MS - 1 }).filter((f) => f.kind === 'nats-outage');
    expect(short.some((f) => f.isolated)).toBe(false);
    expect(planFaults(new Rng(7), { ...o, durationMs: ISOLATING_RUN_MS }).some((f) => f.isolated)).toBe(true);
  });

  it('the schedule draws the events faults only when asked, after the others, which stay the same for a seed', () => {
    const o = { durationMs: 90_000, workers: 2, maxSmtpOutageMs: 4_250 };
    const without = planFaults(new Rng(42), o);
    const withEvents = planFaults(new Rng(42), { ...o, events: { maxNatsOutageMs: 4_250 } });
    expect(without.some((f) => EVENT_FAULT_KINDS.includes(f.kind))).toBe(false);
    expect(withEvents.filter((f) => !EVENT_FAULT_KINDS.includes(f.kind))).toEqual(without);
    expect(withEvents.filter((f) => f.kind === 'stream-delete')).toHaveLength(1); // max(1, 90/180)
    const forged = withEvents.filter((f) => f.kind === 'forged-event');
    expect(forged).toHaveLength(2); // max(2, 90/60)
    expect(new Set(forged.map((f) => f.forgery))).toEqual(new Set(['unknown-booking', 'wrong-amount']));
    for (const seed of [1, 2, 3, 4, 5]) {
      const long = planFaults(new Rng(seed), { ...o, durationMs: 600_000, events: { maxNatsOutageMs: 4_250 } });
      expect(long.filter((f) => f.kind === 'stream-delete')).toHaveLength(3);
      // Every NATS node restart before any stream deletion (nats-server before 2.11, faults/plan.ts).
      const restarts = long.filter((f) => ['nats-outage', 'nats-node-kill', 'nats-node-wipe'].includes(f.kind)).map((f) => f.at);
      const deletions = long.filter((f) => f.kind === 'stream-delete').map((f) => f.at);
      expect(Math.max(...restarts)).toBeLessThan(Math.min(...deletions));
      const kinds = long.filter((f) => f.kind === 'forged-event').map((f) => f.forgery);
      expect(kinds).toHaveLength(10);
      expect(new Set(kinds).size).toBe(2);
    }
    expect(withEvents.filter((f) => f.kind === 'consumer-kill')).toHaveLength(3); // max(2, 90/30)
    const nats = withEvents.filter((f) => f.kind === 'nats-outage');
    expect(nats).toHaveLength(1); // max(1, 90/90)
    for (const f of withEvents) expect(f.at).toBeGreaterThanOrEqual(0.08 * 90_000);
    for (const f of nats) expect(f.downMs).toBeLessThanOrEqual(4_250);
    expect(withEvents.filter((f) => f.kind === 'nats-node-kill')).toHaveLength(2); // max(1, 90/45)
    expect(withEvents.filter((f) => f.kind === 'nats-node-wipe')).toHaveLength(1); // max(1, 90/120)
    for (const f of withEvents.filter((f) => f.kind.startsWith('nats-node-'))) expect(f.node).toBeLessThanOrEqual(2);
  });
});

describe('one fault per target at a time', () => {
  it('a second kill of the same worker waits until the first one has restarted it', async () => {
    const w = fakeProcess(true);
    const d = deps({ workers: [w, fakeProcess(true)] });
    const done = await inject(d, [
      { kind: 'worker-kill', at: 0, downMs: 150, worker: 0 },
      { kind: 'worker-kill', at: 20, downMs: 50, worker: 0 },
    ]);
    expect(done).toHaveLength(2);
    const [a, b] = [...done].sort((x, y) => x.startedAt - y.startedAt);
    expect(b!.startedAt).toBeGreaterThanOrEqual(a!.endedAt);
    expect(b!.waitedMs).toBeGreaterThan(0);
    // Both found the worker running: two real kills, two full outages.
    expect(done.every((f) => f.evidence)).toBe(true);
    expect(w.intervals).toHaveLength(2);
  });

  it('a restart and a pg_terminate_backend (both on the server) take turns; different targets overlap', async () => {
    let stopping = false;
    const order: string[] = [];
    const d = deps({
      postgres: {
        stop: async () => {
          stopping = true;
          order.push('stop');
        },
        start: async () => {
          await new Promise((r) => setTimeout(r, 100));
          stopping = false;
          order.push('start');
        },
      },
      admin: {
        query: async (text: string) => {
          if (text.includes('pg_terminate_backend')) {
            order.push(stopping ? 'terminate-while-down' : 'terminate');
            return { rows: [] };
          }
          return { rows: [{ t: String(order.length) }] };
        },
      } as never,
    });
    const done = await inject(d, [
      { kind: 'pg-restart', at: 0, downMs: 0 },
      { kind: 'pg-terminate-workers', at: 10, downMs: 0 },
      { kind: 'api-kill', at: 10, downMs: 50 },
    ]);
    expect(order).toEqual(['stop', 'start', 'terminate']);
    const restart = done.find((f) => f.kind === 'pg-restart')!;
    const api = done.find((f) => f.kind === 'api-kill')!;
    expect(api.startedAt).toBeLessThan(restart.endedAt);
  });

  it("an SMTP outage and a NATS outage (the workers' two downstreams) are kept apart by the gap; a consumer kill waits for the NATS outage; other faults are not held up", async () => {
    const d = deps({
      downstreamGapMs: GAP,
      events: outagesAndConsumerKills(),
    });
    const done = await inject(d, [
      { kind: 'smtp-outage', at: 0, downMs: GAP / 2 },
      { kind: 'nats-outage', at: GAP / 10, downMs: GAP / 2 },
      { kind: 'consumer-kill', at: GAP / 10, downMs: GAP / 5 },
      { kind: 'api-kill', at: GAP / 10, downMs: GAP / 5 },
    ]);
    const smtp = done.find((f) => f.kind === 'smtp-outage')!;
    const nats = done.find((f) => f.kind === 'nats-outage')!;
    const consumer = done.find((f) => f.kind === 'consumer-kill')!;
    const api = done.find((f) => f.kind === 'api-kill')!;
    expect(nats.startedAt - smtp.endedAt).toBeGreaterThanOrEqual(GAP);
    expect(nats.waitedMs).toBeGreaterThan(0);
    // The consumer cannot start without NATS: its kill comes after the outage, not during it.
    expect(consumer.startedAt).toBeGreaterThanOrEqual(nats.endedAt);
    expect(api.startedAt).toBeLessThan(smtp.endedAt);
    expect(done.every((f) => f.evidence)).toBe(true);
  });
});

describe('the downstream turn', () => {
  it('an SMTP outage does not wait for a NATS outage that is still waiting for its target; the NATS outage keeps the gap after it', async () => {
    const d = deps({
      downstreamGapMs: GAP,
      events: {
        ...outagesAndConsumerKills()!,
        killNatsNode: async (_target, ms) => {
          await new Promise((r) => setTimeout(r, ms));
          return { node: 'n1', wasLeader: false, seen: { pid: 9, code: null, signal: 'SIGKILL' }, wiped: false, caughtUpAfterMs: 5 };
        },
      },
    });
    const done = await inject(d, [
      { kind: 'nats-node-kill', at: 0, downMs: 3 * GAP, leader: false, node: 0 },
      { kind: 'nats-outage', at: GAP / 10, downMs: GAP / 2 },
      { kind: 'smtp-outage', at: GAP / 5, downMs: GAP / 2 },
    ]);
    const node = done.find((f) => f.kind === 'nats-node-kill')!;
    const nats = done.find((f) => f.kind === 'nats-outage')!;
    const smtp = done.find((f) => f.kind === 'smtp-outage')!;
    expect(done.every((f) => f.evidence)).toBe(true);
    // Queued behind the outage, the SMTP outage would have started a gap after it, past 4 gaps.
    expect(smtp.startedAt).toBeLessThan(node.endedAt);
    expect(smtp.waitedMs).toBeLessThan(GAP / 2);
    expect(nats.startedAt).toBeGreaterThanOrEqual(node.endedAt);
    expect(nats.startedAt - smtp.endedAt).toBeGreaterThanOrEqual(GAP);
  });
});

describe('the quiet around an isolated NATS outage', () => {
  it('holds back the faults that hold mail up from before the outage until after it; the others go', async () => {
    const d = deps({
      quietMs: QUIET,
      events: outagesAndConsumerKills(),
    });
    const done = await inject(d, [
      { kind: 'worker-kill', at: 1.5 * QUIET, downMs: QUIET / 5, worker: 0 },
      { kind: 'nats-outage', at: 2 * QUIET, downMs: 0.6 * QUIET, isolated: true },
      { kind: 'api-kill', at: 2.2 * QUIET, downMs: QUIET / 5 },
      { kind: 'pg-terminate-workers', at: 2.5 * QUIET, downMs: 0 },
      { kind: 'nats-outage', at: 3 * QUIET, downMs: QUIET / 5 },
    ]);
    const outage = done.find((f) => f.kind === 'nats-outage' && f.isolated)!;
    const held = done.filter((f) => ['worker-kill', 'pg-terminate-workers'].includes(f.kind) || (f.kind === 'nats-outage' && !f.isolated));
    expect(held).toHaveLength(3);
    // Due 50 ms before the outage (inside its quiet) or during it: started only once the quiet after it ended.
    for (const f of held) expect(f.startedAt, f.kind).toBeGreaterThanOrEqual(outage.endedAt + QUIET);
    // Released as far apart as they were due (not all at once): the kill was due a quiet before the termination.
    const at = (kind: string) => held.find((f) => f.kind === kind)!.startedAt;
    expect(at('pg-terminate-workers') - at('worker-kill')).toBeGreaterThanOrEqual(0.9 * QUIET);
    // An API kill does not hold mail up: it goes when due, in the middle of the outage.
    expect(done.find((f) => f.kind === 'api-kill')!.startedAt).toBeLessThan(outage.endedAt);
  });

  it('starts the isolated outage only once the faults already under way have been over for the quiet', async () => {
    // A kill queued behind its busy worker before the quiet began starts inside it: the outage waits for it.
    const d = deps({ quietMs: QUIET, events: outagesAndConsumerKills() });
    const done = await inject(d, [
      { kind: 'worker-kill', at: 0, downMs: 1.5 * QUIET, worker: 0 },
      { kind: 'worker-kill', at: QUIET / 10, downMs: 1.5 * QUIET, worker: 0 },
      { kind: 'nats-outage', at: 1.5 * QUIET, downMs: 0.3 * QUIET, isolated: true },
    ]);
    const outage = done.find((f) => f.kind === 'nats-outage')!;
    const lastKill = Math.max(...done.filter((f) => f.kind === 'worker-kill').map((f) => f.endedAt));
    expect(lastKill).toBeGreaterThan(1.5 * QUIET);
    expect(outage.startedAt).toBeGreaterThanOrEqual(lastKill + QUIET);
  });
});

describe('the events-path lane', () => {
  it('a stream deletion, a forged event and the node faults wait for a NATS outage and a consumer kill, and for each other', async () => {
    const spans: Record<string, [number, number]> = {};
    const timed = async <T>(name: string, ms: number, value: T): Promise<T> => {
      const t0 = Date.now();
      await new Promise((r) => setTimeout(r, ms));
      spans[name] = [t0, Date.now()];
      return value;
    };
    const d = deps({
      events: {
        killConsumer: () => timed('consumer-kill', 60, { seen: { pid: 5, code: null, signal: 'SIGKILL' }, consuming: true }),
        natsOutage: (ms) =>
          timed('nats-outage', ms, { stopped: { pid: 7, code: 0, signal: null }, refusedWhileDown: true, restartedPid: 8 }),
        deleteStream: () =>
          timed('stream-delete', 60, {
            createdBefore: 'a',
            messagesBefore: 1,
            deleted: true,
            createdAfter: 'b',
            backAfterMs: 60,
            groupBack: true,
          }),
        forgeEvent: () =>
          timed('forged-event', 30, {
            forged: {
              kind: 'unknown-booking',
              messageId: 'm',
              bookingId: 'b',
              propertyId: 'p',
              total: 1,
              realTotal: null,
              currency: 'EUR',
              seq: 3,
              publishedAt: 0,
            },
            deadLetteredAfterMs: 5,
            lastError: 'refused',
          }),
        killNatsNode: (_target, ms) =>
          timed('nats-node-kill', ms, {
            node: 'n1',
            wasLeader: true,
            seen: { pid: 9, code: null, signal: 'SIGKILL' },
            wiped: false,
            caughtUpAfterMs: 5,
          }),
        wipeNatsNode: () =>
          timed('nats-node-wipe', 40, {
            node: 'n3',
            wasLeader: false,
            seen: { pid: 10, code: null, signal: 'SIGKILL' },
            wiped: true,
            caughtUpAfterMs: 5,
          }),
      },
    });
    const done = await inject(d, [
      { kind: 'nats-outage', at: 0, downMs: 80 },
      { kind: 'stream-delete', at: 10, downMs: 0 },
      { kind: 'consumer-kill', at: 15, downMs: 0 },
      { kind: 'forged-event', at: 20, downMs: 0, forgery: 'unknown-booking', pick: 0 },
      { kind: 'nats-node-kill', at: 25, downMs: 30, leader: true },
      { kind: 'nats-node-wipe', at: 30, downMs: 0, node: 2 },
    ]);
    expect(done.every((f) => f.evidence)).toBe(true);
    const order = Object.entries(spans).sort((a, b) => a[1][0] - b[1][0]);
    for (let i = 1; i < order.length; i++) expect(order[i]![1][0], order[i]![0]).toBeGreaterThanOrEqual(order[i - 1]![1][1]);
    expect(done.find((f) => f.kind === 'stream-delete')!.waitedMs).toBeGreaterThan(0);
  });
});

describe('stream deletions after the node faults', () => {
  const timedEvents = (spans: Record<string, [number, number]>) => {
    const timed = async <T>(name: string, ms: number, value: T): Promise<T> => {
      const t0 = Date.now();
      await new Promise((r) => setTimeout(r, ms));
      spans[name] = [t0, Date.now()];
      return value;
    };
    const node = {
      node: 'n1',
      wasLeader: false,
      seen: { pid: 9, code: null, signal: 'SIGKILL' as const },
      wiped: false,
      caughtUpAfterMs: 5,
    };
    return {
      killConsumer: async () => ({ seen: null, consuming: false }),
      natsOutage: async () => ({ stopped: null, refusedWhileDown: false, restartedPid: null }),
      deleteStream: () =>
        timed('stream-delete', 10, {
          createdBefore: 'a',
          messagesBefore: 1,
          deleted: true,
          createdAfter: 'b',
          backAfterMs: 10,
          groupBack: true,
        }),
      forgeEvent: async () => ({ forged: null, deadLetteredAfterMs: null, lastError: null }),
      killNatsNode: (_target: unknown, ms: number) => timed('nats-node-kill', ms, node),
      wipeNatsNode: () => timed('nats-node-wipe', 20, { ...node, wiped: true }),
    };
  };

  it('a deletion due before a node fault starts only once the last node fault has ended', async () => {
    const spans: Record<string, [number, number]> = {};
    const done = await inject(deps({ events: timedEvents(spans) as never }), [
      { kind: 'stream-delete', at: 0, downMs: 0 },
      { kind: 'nats-node-kill', at: 30, downMs: 40, leader: false },
      { kind: 'nats-node-wipe', at: 60, downMs: 0, node: 1 },
    ]);
    expect(done.map((f) => f.kind).sort()).toEqual(['nats-node-kill', 'nats-node-wipe', 'stream-delete']);
    expect(spans['stream-delete']![0]).toBeGreaterThanOrEqual(Math.max(spans['nats-node-kill']![1], spans['nats-node-wipe']![1]));
    // Its wait is reported from when it was due.
    expect(done.find((f) => f.kind === 'stream-delete')!.waitedMs).toBeGreaterThanOrEqual(
      spans['stream-delete']![0] - spans['nats-node-kill']![0],
    );
  });

  it('a run that settles before a node fault was due lets the waiting deletion go', async () => {
    const spans: Record<string, [number, number]> = {};
    const injector = new FaultInjector(deps({ events: timedEvents(spans) as never }));
    injector.start([
      { kind: 'stream-delete', at: 0, downMs: 0 },
      { kind: 'nats-node-kill', at: 60_000, downMs: 10, leader: false },
    ]);
    await new Promise((r) => setTimeout(r, 30));
    expect(spans['stream-delete']).toBeUndefined();
    await injector.settle();
    expect(injector.done.map((f) => f.kind)).toEqual(['stream-delete']);
  });
});

describe('the supervisor (a real child process)', () => {
  it('reports the exit it caused, and null for a kill of a process that is already gone', async () => {
    const entry = path.join(dir, 'idle.mjs');
    writeFileSync(entry, 'setInterval(() => {}, 1000);\n');
    const s = new Supervised({ name: 'idle', entry, env: { PATH: process.env.PATH }, logFile: path.join(dir, 'idle.log') });
    s.start();
    const pid = s.pid;
    try {
      const first = await s.kill('SIGKILL');
      expect(first).toEqual({ pid, code: null, signal: 'SIGKILL' });
      expect(await s.kill('SIGKILL')).toBeNull();
      expect(s.unplannedExits).toEqual([]);
    } finally {
      await s.stop(2_000);
    }
  });
});
