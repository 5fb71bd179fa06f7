import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager } from '@nats-io/jetstream';
import type { Db } from '../../db/client.ts';
import { withTransaction } from '../../db/transaction.ts';
import type { Logger } from '../../logger.ts';
import { ensureGroup, resetGroup, type GroupOptions, type StartAt } from '../group.ts';
import { clearInbox } from '../inbox.ts';
import { describeHoldings, groupMissedEvents, type StreamHoldings } from '../retention.ts';
import { onceJetStreamAnswers } from '../connection.ts';
import { clearLedger, ledgerHasHistory, rebuildLedger } from './ledger.ts';

/*
 * Where the earnings group starts reading, chosen once at start-up from the flags and from what
 * the stream still holds (../retention.ts): a rebuild from the bookings table, a replay from the
 * stream, or the group's own position. A replay or a new group is refused when the stream no
 * longer holds the events it would need.
 */

export interface StartRequest {
  replay: boolean;
  acceptGap: boolean;
  /** --from, as typed (ISO 8601, already checked). */
  from: string | undefined;
}

export interface StartContext {
  jsm: JetStreamManager;
  db: Db;
  groupOptions: GroupOptions;
  holdings: StreamHoldings;
  logger: Logger;
  errOut: (line: string) => void;
}

/** A refusal (already explained on errOut), or what the start leaves for the metrics to report. */
export type StartOutcome = { refused: true } | { refused: false; agedOut: boolean; ledgerRebuilt: boolean };

const STARTED: StartOutcome = { refused: false, agedOut: false, ledgerRebuilt: false };

export function positionGroup(c: StartContext, req: StartRequest): Promise<StartOutcome> {
  if (req.replay && req.acceptGap) return rebuildThenReadStream(c);
  if (req.replay) return replayFromStream(c, req.from);
  return resumeGroup(c);
}

function whatIsMissing(c: StartContext): string {
  return `stream ${c.groupOptions.stream} no longer holds every event: ${describeHoldings(c.holdings)}`;
}

/** --replay --accept-gap: the ledger from the bookings table, then the stream from its first event. */
async function rebuildThenReadStream(c: StartContext): Promise<StartOutcome> {
  const rebuilt = await rebuildLedger(c.db, c.groupOptions.group);
  await resetGroup(c.jsm, c.groupOptions, { from: 'start' });
  c.logger.info(
    { ...rebuilt, firstSeq: c.holdings.firstSeq },
    'ledger rebuilt from the bookings table; reading the stream from its first event (what the ledger counts is skipped)',
  );
  return STARTED;
}

/** --replay [--from T]: the group restarted at the stream's first event (ledger and inbox emptied) or at T. */
async function replayFromStream(c: StartContext, fromFlag: string | undefined): Promise<StartOutcome> {
  const group = c.groupOptions.group;
  const from = fromFlag === undefined ? undefined : new Date(fromFlag);
  const refusal = replayRefusal(c.holdings, from);
  if (refusal) {
    c.errOut(
      `consume:earnings: refusing --replay${fromFlag ? ` --from ${fromFlag}` : ''} of group ${group}: ${whatIsMissing(c)}. ` +
        `A ledger replayed from it would leave out what those events brought. ${refusal}`,
    );
    return { refused: true };
  }
  const start: StartAt = from ? { from: 'time', time: from } : { from: 'start' };
  if (start.from === 'start') {
    await withTransaction(c.db, async (tx) => {
      await clearLedger(tx, group);
      await clearInbox(tx, group);
    });
  }
  await resetGroup(c.jsm, c.groupOptions, start);
  c.logger.info({ from: fromFlag ?? 'stream start' }, 'group reset for replay');
  return STARTED;
}

/** No --replay: the group where it stopped, or a new group at the stream's first event. */
async function resumeGroup(c: StartContext): Promise<StartOutcome> {
  const { group, stream } = c.groupOptions;
  const { holdings, logger } = c;
  let ledgerRebuilt = false;
  const exists = await onceJetStreamAnswers('consumer group', () => groupExists(c.jsm, stream, group), { log: logger });
  if (!exists && (await ledgerHasHistory(c.db, group))) {
    // The group counted events before, and its durable consumer is gone: its stream or the
    // durable was deleted while no process of it ran. Events it had not read may have gone
    // with them, and a new stream starts at 1, so nothing else would tell. The ledger is
    // derived data: rebuilt from the bookings table, then the stream is read from its start.
    const rebuilt = await rebuildLedger(c.db, group);
    ledgerRebuilt = true;
    logger.warn(
      { ...rebuilt, firstSeq: holdings.firstSeq },
      `group ${group} has a ledger but no durable consumer on stream ${stream} (the stream or the group ` +
        'was deleted): events it had not read may be gone. Ledger rebuilt from the bookings table; reading the stream from its first event',
    );
  } else if (!holdings.complete && !exists) {
    c.errOut(
      `consume:earnings: refusing to start group ${group}: it has no durable consumer on the stream, and a new one ` +
        `starts at the stream's first event, but ${whatIsMissing(c)}. Build its ledger from the bookings table, then read the ` +
        `stream from there: --replay --accept-gap.`,
    );
    return { refused: true };
  }
  const info = await onceJetStreamAnswers('consumer group', () => ensureGroup(c.jsm, c.groupOptions, { from: 'start' }, logger), {
    log: logger,
  });
  const agedOut = groupMissedEvents(info, holdings);
  if (agedOut) {
    logger.error(
      {
        firstSeq: holdings.firstSeq,
        firstAt: holdings.firstAt,
        delivered: info.delivered.stream_seq,
        ackFloor: info.ack_floor.stream_seq,
      },
      `group ${group} lost events: some it had not read are gone from the stream (${describeHoldings(holdings)}), and ` +
        'its ledger misses what they brought. Rebuild it from the bookings table: stop its processes, then ' +
        'consume:earnings --replay --accept-gap',
    );
  }
  return { refused: false, agedOut, ledgerRebuilt };
}

/**
 * Why a replay from the stream cannot be trusted (and what to run instead), or undefined when the
 * stream holds every event it needs: all of them for a full replay, all since `from` otherwise.
 * Deleted events could be anywhere: any of them refuses a replay from a time as well.
 */
function replayRefusal(h: StreamHoldings, from: Date | undefined): string | undefined {
  const sinceFrom =
    from !== undefined &&
    h.deleted === 0 &&
    (h.recreated === undefined || h.recreated.at <= from) &&
    (h.firstSeq <= 1 || (h.firstAt !== null && h.firstAt <= from));
  if (h.complete || sinceFrom) return undefined;
  const keep =
    h.deleted === 0 && h.firstAt !== null
      ? `or keep the ledger and read again only what the stream holds (--replay --from ${h.firstAt.toISOString()})`
      : 'or keep the ledger as it is (start without --replay)';
  return `Either rebuild it from the bookings table instead (--replay --accept-gap), ${keep}.`;
}

async function groupExists(jsm: JetStreamManager, stream: string, group: string): Promise<boolean> {
  return jsm.consumers.info(stream, group).then(
    () => true,
    (err: unknown) => {
      if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound) return false;
      throw err;
    },
  );
}
