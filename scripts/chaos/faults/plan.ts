import type { ForgeryKind } from '../events/observed.ts';
import type { Rng } from '../rng.ts';
import { QUIET_MS } from './injector.ts';
import type { PlannedFault } from './types.ts';

/*
 * The fault schedule, drawn from the seed before the load starts: the same --seed gives the same
 * faults at the same offsets.
 */

export interface ScheduleOptions {
  durationMs: number;
  workers: number;
  /** The longest an SMTP outage may last and still be shorter than the retry window. */
  maxSmtpOutageMs: number;
  /** The events path runs (nats-server and the earnings consumer): plan its faults too. */
  events?: { maxNatsOutageMs: number };
}

/**
 * Faults fall between 8% and 75% of the load, so the run also shows the system settling after the
 * last one. Counts scale with the duration; a one-minute run still gets every kind.
 */
export function planFaults(rng: Rng, o: ScheduleOptions): PlannedFault[] {
  const d = o.durationMs;
  const when = (from = 0.08, to = 0.75) => Math.round(rng.between(from * d, to * d));
  const seconds = d / 1000;
  const plan: PlannedFault[] = [];
  // As many of a kind as the run's length asks, one per `everySeconds`, at least `min`; each
  // fault's draws in the order written.
  const add = (min: number, everySeconds: number, fault: (i: number) => PlannedFault) => {
    for (let i = 0; i < Math.max(min, Math.round(seconds / everySeconds)); i++) plan.push(fault(i));
  };
  add(4, 15, () => ({ kind: 'worker-kill', at: when(), downMs: rng.int(300, 3_000), worker: rng.int(0, o.workers - 1) }));
  add(1, 90, () => ({ kind: 'api-kill', at: when(), downMs: rng.int(200, 2_000) }));
  add(1, 120, () => ({ kind: 'smtp-outage', at: when(), downMs: rng.int(1_000, Math.max(1_000, o.maxSmtpOutageMs)) }));
  plan.push({ kind: 'pg-restart', at: when(0.3, 0.6), downMs: rng.int(0, 1_500) });
  add(2, 30, () => ({ kind: 'pg-terminate-workers', at: when(), downMs: 0 }));
  // Drawn last, so the faults above are the same for a seed whether or not the events part runs.
  if (o.events) {
    const maxNatsOutageMs = o.events.maxNatsOutageMs;
    add(2, 30, () => ({ kind: 'consumer-kill', at: when(), downMs: rng.int(200, 2_000) }));
    add(1, 90, (i) => ({
      kind: 'nats-outage',
      at: when(0.08, NODES_RESTART_BY),
      downMs: rng.int(1_000, Math.max(1_000, maxNatsOutageMs)),
      // The first and every third one after it: the email pace is judged on these alone.
      ...(i % ISOLATE_EVERY === 0 && d >= ISOLATING_RUN_MS ? { isolated: true } : {}),
    }));
    // Drawn after the events faults above, so those stay the same for a seed.
    add(1, 180, () => ({ kind: 'stream-delete', at: when(NODES_RESTART_BY + 0.05, 0.75), downMs: 0 }));
    // Both lies in every run: the first two forgeries are one of each, in an order drawn from the seed.
    const both = rng.chance(0.5) ? FORGERIES : [...FORGERIES].reverse();
    add(2, 60, (i) => {
      const forgery = both[i] ?? rng.pick(FORGERIES);
      return { kind: 'forged-event', at: when(), downMs: 0, forgery, pick: rng.next() };
    });
    // The cluster's node faults, drawn after every other so those stay the same for a seed. Half
    // the kills and wipes hit a leader: a leader lost is an election, the hardest moment.
    const node = (kind: 'nats-node-kill' | 'nats-node-wipe', downMs: () => number) => () => ({
      kind,
      at: when(0.08, NODES_RESTART_BY),
      downMs: downMs(),
      leader: rng.chance(0.5),
      node: rng.int(0, 2),
    });
    add(
      1,
      45,
      node('nats-node-kill', () => rng.int(500, 4_000)),
    );
    add(
      1,
      120,
      node('nats-node-wipe', () => 0),
    );
  }
  return plan.sort((a, b) => a.at - b.at);
}

const FORGERIES: ForgeryKind[] = ['unknown-booking', 'wrong-amount'];

/**
 * Which NATS outages are isolated (the injector keeps the faults that hold mail up away from them,
 * for the length of the email-pace comparison either side): one in three, so the holds (about 50 s
 * each) leave most of the run to the faults as drawn.
 */
const ISOLATE_EVERY = 3;
/**
 * The shortest run with isolated outages: ten quiets. In a shorter one the quiet before and after
 * an outage would hold back most of its faults until the load is over.
 */
export const ISOLATING_RUN_MS = 10 * QUIET_MS;

/**
 * The share of the load by which every NATS node restart (an outage, a node kill or wipe) is due;
 * stream deletions come after it. nats-server before 2.11 mishandles a node that restarts after
 * a stream was deleted and recreated under the same name while it ran ("detected duplicate
 * assignment", "No RAFT group" in its log): that node stays on the deleted stream's RAFT group and
 * never holds the new stream, and a second node lost then loses the majority. Seen here with
 * Debian's 2.9.10 (nats-server pull requests 7510 and 8413 fix it); a server bug the run would
 * only rediscover, so the two kinds of fault are kept apart in time.
 */
const NODES_RESTART_BY = 0.5;
