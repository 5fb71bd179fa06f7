import { setTimeout as sleep } from 'node:timers/promises';
import { JetStreamApiCodes, JetStreamApiError, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { onceJetStreamAnswers } from '../../../src/events/connection.ts';
import type { EventsStage, StreamDeleteObserved } from './observed.ts';

/**
 * Deletes the events stream under the relay and the consumer, then waits (up to `backWithinMs`)
 * until it is back (the relay recreates it on its next publish, the consumer when its pull
 * fails; both wait 2 s first) with the group's durable on it. 45 s: on a loaded machine a
 * three-node cluster's delete and re-create, each through its leaders, took longer than 20 s.
 */
export async function deleteStream(s: EventsStage, backWithinMs = 45_000): Promise<StreamDeleteObserved> {
  const nc = await connect({ servers: s.nats.servers, timeout: 3_000 });
  try {
    // Right after a node kill the cluster may still be electing: the API times out for a
    // few seconds, which is the cluster's business, not a failed fault.
    const jsm = await onceJetStreamAnswers('JetStream API', () => jetstreamManager(nc));
    const before = await onceJetStreamAnswers('stream info', () => jsm.streams.info(s.stream)).catch(() => null);
    if (!before) return { createdBefore: null, messagesBefore: 0, deleted: false, createdAfter: null, backAfterMs: null, groupBack: false };
    // A delete whose answer was lost to a timeout has happened: the retry's "not found" says so.
    const deleted = await onceJetStreamAnswers('stream delete', () =>
      jsm.streams.delete(s.stream).catch((err: unknown) => {
        if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return true;
        throw err;
      }),
    );
    const at = Date.now();
    const { after, groupBack } = await recreated(s, jsm, before.created, at, backWithinMs);
    s.deletions.push({ at, createdBefore: before.created, createdAfter: after });
    return {
      createdBefore: before.created,
      messagesBefore: before.state.messages,
      deleted,
      createdAfter: after,
      backAfterMs: after && groupBack ? Date.now() - at : null,
      groupBack,
    };
  } finally {
    await nc.close();
  }
}

/** Waits until a stream created after `createdBefore` is there with the group's durable on it (bounded). */
async function recreated(s: EventsStage, jsm: JetStreamManager, createdBefore: string, at: number, withinMs: number) {
  let after: string | null = null;
  let groupBack = false;
  while (Date.now() - at < withinMs) {
    await sleep(100);
    const info = await jsm.streams.info(s.stream).catch(() => null);
    if (!info || info.created === createdBefore) continue;
    after = info.created;
    groupBack = await jsm.consumers.info(s.stream, s.group).then(
      () => true,
      () => false,
    );
    if (groupBack) break;
  }
  return { after, groupBack };
}
