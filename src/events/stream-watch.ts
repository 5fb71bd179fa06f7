import { EventEmitter } from 'node:events';
import { JetStreamApiCodes, JetStreamApiError, jetstreamManager, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Config } from '../config.ts';
import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import { closeNats, connectNats } from './connection.ts';
import { createJetStreamPublisher, type EventPublisher } from './publisher.ts';
import { reconcileStream, type ReconcileCounts } from './reconcile.ts';
import {
  bringBack,
  describeDifferences,
  desiredStream,
  duplicateWindowSeconds,
  streamDifferences,
  type SettingDifference,
} from './stream.ts';

/*
 * The worker's watch over its stream while it runs. The relay checks the stream's settings when
 * it starts; someone changing them on the live stream afterwards (max_msgs=20 dropped 30 events
 * without a sign; a 1 s duplicate window stayed until the next restart) went unnoticed. And the
 * stream can lose events the relay was told it stored (reconcile.ts). So, on two timers:
 *
 * - every EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS (30 s): the stream's settings against the
 *   relay's own (streamDifferences, the relay's role). What JetStream changes in place is brought
 *   back and logged; what it cannot (storage, retention, a sealed stream, replicas a cluster
 *   refuses, a max age the operator did not allow lowering) is logged as an error every round and
 *   reported as a gauge until someone fixes it. A missing stream is left to the relay, which
 *   recreates it on its next publish (after DELETED_STREAM_SETTLE_MS).
 * - every EVENTS_RECONCILE_INTERVAL_SECONDS (300 s; 0 = off): reconcileStream over the events
 *   processed in the last reconcileWindowSeconds.
 *
 * Each round waits for the previous one: a slow round delays the next, never overlaps it. Several
 * workers each run it: the settings fix is the same write, and a republish of the same id by two
 * of them is stored once (the first one's publish starts a fresh duplicate window).
 */

/** What the watch reports; src/metrics/worker-metrics.ts counts it. */
export interface StreamWatchEvents {
  /** A settings round that found differences. */
  settings: [{ differences: SettingDifference[]; fixed: boolean }];
  /** Settings that cannot be brought back in place, after each round (0 when none). */
  unfixable: [number];
  /** A finished reconcile round. */
  reconciled: [ReconcileCounts];
}

export interface StreamWatch {
  events: EventEmitter<StreamWatchEvents>;
  /** Runs one settings round now (tests and start-up); resolves with what it found. */
  checkSettings(): Promise<SettingDifference[]>;
  /** Runs one reconcile round now. */
  reconcile(): Promise<ReconcileCounts | undefined>;
  stop(): Promise<void>;
}

/**
 * How far back each scheduled reconcile looks: the duplicate window plus two intervals. An event
 * deleted inside the window cannot be stored again until it has passed, so each event must fall
 * in at least one round that runs after its window: with window + interval every event does, and
 * the second interval covers a round that ran late or failed. With the defaults (794 s window,
 * 300 s interval) 1,394 s, about 23 minutes of events each round.
 */
export function reconcileWindowSeconds(config: Config): number {
  return duplicateWindowSeconds(config) + 2 * config.EVENTS_RECONCILE_INTERVAL_SECONDS;
}

export function startStreamWatch(o: { config: Config; db: Db; logger: Logger; connect?: typeof connectNats }): StreamWatch {
  const { config } = o;
  if (!config.NATS_URL) throw new Error('startStreamWatch needs NATS_URL');
  const w: Watch = {
    config,
    db: o.db,
    url: config.NATS_URL,
    connect: o.connect ?? connectNats,
    logger: o.logger,
    log: o.logger.child({ component: 'events-stream-watch', stream: config.EVENTS_STREAM }),
    events: new EventEmitter<StreamWatchEvents>(),
    nc: undefined,
    publisher: undefined,
    stopped: false,
    timers: new Set(),
    running: new Set(),
  };
  const checkSettings = () => checkStreamSettings(w);
  const reconcile = () => reconcileRound(w);
  every(w, config.EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS, 'the events stream settings check', checkSettings);
  if (config.EVENTS_RECONCILE_INTERVAL_SECONDS > 0) every(w, config.EVENTS_RECONCILE_INTERVAL_SECONDS, 'the events reconcile', reconcile);

  return {
    events: w.events,
    checkSettings,
    reconcile,
    async stop() {
      w.stopped = true;
      for (const t of w.timers) clearTimeout(t);
      w.timers.clear();
      // A round in progress stops at its next message (isStopping) or fails on the closed connection.
      await Promise.all(w.running);
      await w.publisher?.close();
      const c = await w.nc?.catch(() => undefined);
      if (c) await closeNats(c);
    },
  };
}

/** What the watch keeps between its rounds. */
interface Watch {
  config: Config;
  db: Db;
  url: string;
  connect: typeof connectNats;
  /** The caller's logger (the publisher's parent); `log` is the watch's own child of it. */
  logger: Logger;
  log: Logger;
  events: EventEmitter<StreamWatchEvents>;
  nc: Promise<NatsConnection> | undefined;
  publisher: EventPublisher | undefined;
  stopped: boolean;
  timers: Set<NodeJS.Timeout>;
  running: Set<Promise<unknown>>;
}

function connection(w: Watch): Promise<NatsConnection> {
  w.nc ??= w.connect(w.url, 'stayhub-stream-watch').catch((err: unknown) => {
    w.nc = undefined;
    throw err;
  });
  return w.nc;
}

/** One settings round: the live stream against the relay's settings; what can be is brought back. */
async function checkStreamSettings(w: Watch): Promise<SettingDifference[]> {
  const { config, log, events } = w;
  const jsm = await jetstreamManager(await connection(w), { timeout: 5000 });
  const want = desiredStream(config);
  let current;
  try {
    current = await jsm.streams.info(want.name);
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return [];
    throw err;
  }
  const differences = streamDifferences(current.config, want, 'relay', config.EVENTS_ALLOW_SHORTER_MAX_AGE);
  // A sealed stream takes no change at all (sealing also sets discard "new" and max age 0).
  const sealed = current.config.sealed === true;
  const fixable = differences.filter((d) => d.fixedInPlace && !sealed);
  const unfixable = differences.filter((d) => !d.fixedInPlace || sealed);
  if (fixable.length > 0) unfixable.push(...(await bringBackInPlace(w, jsm, { current, want, fixable })));
  if (unfixable.length > 0) {
    log.error(
      { differences: describeDifferences(unfixable) },
      'events stream settings differ from the configuration and cannot be brought back in place: events may be lost or refused until someone fixes them',
    );
    events.emit('settings', { differences: unfixable, fixed: false });
  }
  events.emit('unfixable', unfixable.length);
  return differences;
}

/** Brings the fixable differences back; returns them as unfixable (with why) when JetStream refuses. */
async function bringBackInPlace(
  w: Watch,
  jsm: JetStreamManager,
  { current, want, fixable }: { current: StreamInfo; want: ReturnType<typeof desiredStream>; fixable: SettingDifference[] },
): Promise<SettingDifference[]> {
  try {
    await bringBack(jsm, current, want, fixable);
    w.log.warn(
      { changed: describeDifferences(fixable) },
      'events stream settings changed on the live stream; brought back to the configuration',
    );
    w.events.emit('settings', { differences: fixable, fixed: true });
    return [];
  } catch (err) {
    w.log.error(
      { err, changed: describeDifferences(fixable) },
      'events stream settings changed on the live stream, and JetStream refused to bring them back',
    );
    return fixable.map((d) => ({ ...d, fixedInPlace: false, why: (err as Error).message }));
  }
}

/** One reconcile round over the last reconcileWindowSeconds; undefined when stopped before its end. */
async function reconcileRound(w: Watch): Promise<ReconcileCounts | undefined> {
  const { config, log } = w;
  w.publisher ??= createJetStreamPublisher(config, w.logger, { connectionName: 'stayhub-stream-watch-publisher', ownsStream: false });
  const since = new Date(Date.now() - reconcileWindowSeconds(config) * 1000);
  const result = await reconcileStream({
    db: w.db,
    nc: await connection(w),
    publisher: w.publisher,
    config,
    log,
    since,
    isStopping: () => w.stopped,
  });
  if (result.stopped) return undefined;
  const { checked, present, republished, inWindow, failed } = result;
  const counts = { checked, present, republished, inWindow, failed };
  if (republished + inWindow + failed > 0) {
    log.error(
      { ...counts, since: since.toISOString(), missing: result.missingIds.slice(0, 20) },
      'the stream lacked events the outbox relayed; published again what it could',
    );
  } else log.debug({ ...counts, since: since.toISOString() }, 'the stream holds every event the outbox relayed');
  w.events.emit('reconciled', counts);
  return counts;
}

/** Runs `round` every `seconds`, each after the previous one ended; a failure is logged and retried next time. */
function every(w: Watch, seconds: number, what: string, round: () => Promise<unknown>): void {
  const schedule = () => {
    if (w.stopped) return;
    const timer = setTimeout(() => {
      w.timers.delete(timer);
      const r = round()
        .catch((err: unknown) => {
          if (!w.stopped) w.log.warn({ err }, `${what} failed; trying again in ${seconds} s`);
        })
        .finally(() => {
          w.running.delete(r);
          schedule();
        });
      w.running.add(r);
    }, seconds * 1000);
    timer.unref();
    w.timers.add(timer);
  };
  schedule();
}
