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

interface StreamWatchDeps {
  config: Config;
  db: Db;
  logger: Logger;
  /** How the watch reaches NATS (default connectNats). */
  connect?: typeof connectNats;
}

export function startStreamWatch(o: StreamWatchDeps): StreamWatch {
  const watch = new JetStreamWatch(o);
  watch.schedule();
  return watch;
}

class JetStreamWatch implements StreamWatch {
  readonly events = new EventEmitter<StreamWatchEvents>();
  private readonly config: Config;
  private readonly db: Db;
  private readonly url: string;
  private readonly connect: typeof connectNats;
  /** The caller's logger (the publisher's parent); `log` is the watch's own child of it. */
  private readonly logger: Logger;
  private readonly log: Logger;
  private nc: Promise<NatsConnection> | undefined;
  private publisher: EventPublisher | undefined;
  private stopped = false;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly running = new Set<Promise<unknown>>();

  constructor(o: StreamWatchDeps) {
    const { config } = o;
    if (!config.NATS_URL) throw new Error('startStreamWatch needs NATS_URL');
    this.config = config;
    this.db = o.db;
    this.url = config.NATS_URL;
    this.connect = o.connect ?? connectNats;
    this.logger = o.logger;
    this.log = o.logger.child({ component: 'events-stream-watch', stream: config.EVENTS_STREAM });
  }

  /** Starts both timers (the reconcile's only when its interval is not 0). */
  schedule(): void {
    const { config } = this;
    this.every(config.EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS, 'the events stream settings check', () => this.checkSettings());
    if (config.EVENTS_RECONCILE_INTERVAL_SECONDS > 0) {
      this.every(config.EVENTS_RECONCILE_INTERVAL_SECONDS, 'the events reconcile', () => this.reconcile());
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    // A round in progress stops at its next message (isStopping) or fails on the closed connection.
    await Promise.all(this.running);
    await this.publisher?.close();
    const c = await this.nc?.catch(() => undefined);
    if (c) await closeNats(c);
  }

  /** One settings round: the live stream against the relay's settings; what can be is brought back. */
  async checkSettings(): Promise<SettingDifference[]> {
    const { config, log, events } = this;
    const jsm = await jetstreamManager(await this.connection(), { timeout: 5000 });
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
    if (fixable.length > 0) unfixable.push(...(await this.bringBackInPlace(jsm, { current, want, fixable })));
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

  /** One reconcile round over the last reconcileWindowSeconds; undefined when stopped before its end. */
  async reconcile(): Promise<ReconcileCounts | undefined> {
    const { config, log } = this;
    this.publisher ??= createJetStreamPublisher(config, this.logger, {
      connectionName: 'stayhub-stream-watch-publisher',
      ownsStream: false,
    });
    const since = new Date(Date.now() - reconcileWindowSeconds(config) * 1000);
    const result = await reconcileStream({
      db: this.db,
      nc: await this.connection(),
      publisher: this.publisher,
      config,
      log,
      since,
      isStopping: () => this.stopped,
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
    this.events.emit('reconciled', counts);
    return counts;
  }

  private connection(): Promise<NatsConnection> {
    this.nc ??= this.connect(this.url, 'stayhub-stream-watch').catch((err: unknown) => {
      this.nc = undefined;
      throw err;
    });
    return this.nc;
  }

  /** Brings the fixable differences back; returns them as unfixable (with why) when JetStream refuses. */
  private async bringBackInPlace(
    jsm: JetStreamManager,
    { current, want, fixable }: { current: StreamInfo; want: ReturnType<typeof desiredStream>; fixable: SettingDifference[] },
  ): Promise<SettingDifference[]> {
    try {
      await bringBack(jsm, current, want, fixable);
      this.log.warn(
        { changed: describeDifferences(fixable) },
        'events stream settings changed on the live stream; brought back to the configuration',
      );
      this.events.emit('settings', { differences: fixable, fixed: true });
      return [];
    } catch (err) {
      this.log.error(
        { err, changed: describeDifferences(fixable) },
        'events stream settings changed on the live stream, and JetStream refused to bring them back',
      );
      return fixable.map((d) => ({ ...d, fixedInPlace: false, why: (err as Error).message }));
    }
  }

  /** Runs `round` every `seconds`, each after the previous one ended; a failure is logged and retried next time. */
  private every(seconds: number, what: string, round: () => Promise<unknown>): void {
    const schedule = () => {
      if (this.stopped) return;
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        const r = round()
          .catch((err: unknown) => {
            if (!this.stopped) this.log.warn({ err }, `${what} failed; trying again in ${seconds} s`);
          })
          .finally(() => {
            this.running.delete(r);
            schedule();
          });
        this.running.add(r);
      }, seconds * 1000);
      timer.unref();
      this.timers.add(timer);
    };
    schedule();
  }
}
