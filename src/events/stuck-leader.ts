import type { NatsConnection } from '@nats-io/transport-node';

/*
 * A stream that answers for itself and takes no publish, for longer than an election lasts.
 *
 * Seen in a chaos run on nats-server 2.9.10: a node killed while it led the stream, restarted after
 * the stream had been deleted and recreated, logged "detected duplicate assignment" and went on
 * leading the stream's group without listening on its subjects. The stream's info and its update
 * were answered (by that leader), every publish found no responders, and nothing changed for the
 * four minutes until the run ended: no election was due, since the group had a leader. Declaring
 * the stream again changes nothing either. Asking the leader to step down does: another node is
 * elected and listens on the subjects (a leader that steps up again subscribes afresh).
 *
 * So the relay follows how long publishes have found the stream declared and nobody taking them,
 * and past a bound asks for another leader, then again at most once per bound while it lasts.
 * The bound is several publish timeouts: an ordinary election (a lost node, a restart) ends well
 * within it and is left alone.
 */

/** Publish timeouts a stream may take no publish while it answers for itself before its leader is asked to step down. */
export const STEP_DOWN_AFTER_TIMEOUTS = 4;

export class StuckLeaderWatch {
  private since: number | undefined;
  private askedAt: number | undefined;

  constructor(private readonly boundMs: number) {}

  /** A publish was stored: whatever was stuck is not any more. */
  stored(): void {
    this.since = undefined;
    this.askedAt = undefined;
  }

  /**
   * A publish found the stream declared and nobody taking it, at `now`. True when the leader is
   * to be asked to step down now: stuck for the bound, and not asked within the last bound.
   */
  nobodyTook(now: number): boolean {
    this.since ??= now;
    if (now - this.since < this.boundMs) return false;
    if (this.askedAt !== undefined && now - this.askedAt < this.boundMs) return false;
    this.askedAt = now;
    return true;
  }

  /** How long publishes have found nobody, in ms (0 when they are stored). */
  stuckMs(now: number): number {
    return this.since === undefined ? 0 : now - this.since;
  }
}

/**
 * Asks the leader of `stream` to step down (JetStream elects another among its replicas). Resolves
 * to null when it did, or to why not: refused (a single server, no such stream) or not answered.
 */
export function askStreamLeaderToStepDown(nc: NatsConnection, stream: string, timeoutMs: number): Promise<string | null> {
  return askLeaderToStepDown(nc, `$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, timeoutMs);
}

/** The same for a consumer group's leader (a group led from a copy of the stream that is behind). */
export function askGroupLeaderToStepDown(nc: NatsConnection, stream: string, group: string, timeoutMs: number): Promise<string | null> {
  return askLeaderToStepDown(nc, `$JS.API.CONSUMER.LEADER.STEPDOWN.${stream}.${group}`, timeoutMs);
}

async function askLeaderToStepDown(nc: NatsConnection, apiSubject: string, timeoutMs: number): Promise<string | null> {
  try {
    const reply = await nc.request(apiSubject, '', { timeout: timeoutMs });
    const { error } = reply.json<{ error?: { description?: string } }>();
    return error ? `refused: ${error.description ?? 'no reason given'}` : null;
  } catch (err) {
    return `not answered: ${(err as Error).message}`;
  }
}
