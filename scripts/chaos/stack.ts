import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { createPool } from '../../src/db/client.ts';
import { runMigrations } from '../../src/db/migrate.ts';
import { ensureWalSlot, registerOutboxHooks } from '../../src/outbox/index.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { lifelineEnv } from '../../src/process/lifeline.ts';
import { until } from '../lib/nats.ts';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../lib/postgres.ts';
import { freePort, entryArgs, ROOT } from '../lib/processes.ts';
import { startEventsChaos, type EventsChaos } from './events/events-chaos.ts';
import { Supervised, type ChildSpec } from './processes.ts';
import { MAIL_FROM, TEMP_FAIL_RATE, WORKER_ENV } from './settings.ts';
import type { SinkOptions } from './smtp-sink.ts';
import { WEBHOOK_ENV } from './webhooks.ts';

/*
 * The chaos run's stage: a temporary folder the `postgres` user can reach, free ports, and the
 * real system started on them — embedded PostgreSQL (migrated), the SMTP server, the API, the
 * events path (nats-server cluster and earnings consumer) when it runs, and two outbox workers.
 * Everything on loopback: it never touches the developer's database or `npm start`'s ports.
 */

export type Say = (msg: string) => void;

/** The worker's own list of the topics it handles (`drain-outbox --list-topics`). */
async function listTopics(env: NodeJS.ProcessEnv): Promise<string[]> {
  // Not scripts/lib's runProcess: that one adds this process's environment, and the run's
  // processes get the run's settings only.
  const run = promisify(execFile);
  const { stdout } = await run(process.execPath, entryArgs('src/commands/drain-outbox.ts', '--list-topics'), {
    cwd: ROOT,
    env: { ...env, ...lifelineEnv() },
  });
  return stdout
    .split('\n')
    .map((l) => l.split(':')[0]!.trim())
    .filter(Boolean);
}

export class ChaosStack {
  readonly logs: string;
  readonly recordFile: string;
  readonly bounceEmails: string[];
  readonly children: Supervised[] = [];
  postgres?: ThrowawayPostgres;
  admin?: pg.Pool;
  ev?: EventsChaos;
  smtp!: Supervised;
  api!: Supervised;
  workers: Supervised[] = [];
  /** When each worker last reported a handler outcome (ms epoch). */
  readonly lastWorkerActivity = [0, 0];
  handledTopics: string[] = [];
  apiUrl = '';
  private smtpPort = 0;

  private constructor(
    readonly dir: string,
    private readonly seed: number,
    private readonly say: Say,
  ) {
    this.logs = path.join(dir, 'logs');
    mkdirSync(this.logs);
    this.recordFile = path.join(dir, 'smtp-received.jsonl');
    writeFileSync(this.recordFile, '');
    this.bounceEmails = [`bounce-1-${seed}@chaos.test`, `bounce-2-${seed}@chaos.test`];
  }

  /** The temporary folder: made before anything starts, so a failure can say where the logs are. */
  static prepare(seed: number, say: Say): ChaosStack {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-chaos-'));
    chmodSync(dir, 0o755);
    return new ChaosStack(dir, seed, say);
  }

  /**
   * Starts every part; `sinkSeed` draws the SMTP server's refusals, `withEvents` adds the events
   * path, `outboxWrites` is the API's OUTBOX_WRITES (wal: the slot is made before the API starts).
   */
  async start(sinkSeed: number, withEvents: boolean, outboxWrites: 'table' | 'wal' = 'table'): Promise<void> {
    const databaseUrl = await this.startDatabase(outboxWrites);
    const baseEnv: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      OUTBOX_WRITES: outboxWrites,
      LOG_LEVEL: 'info',
      MAIL_FROM,
      // The webhook receivers listen on 127.0.0.1: the API registers and the workers call them.
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    };
    this.smtpPort = await freePort();
    const apiPort = await freePort();
    this.apiUrl = `http://127.0.0.1:${apiPort}`;
    const sinkOptions: SinkOptions = {
      port: this.smtpPort,
      recordFile: this.recordFile,
      seed: sinkSeed,
      tempFailRate: TEMP_FAIL_RATE,
      rejectRecipients: this.bounceEmails,
      latencyMs: [5, 40],
    };
    this.smtp = this.supervise({ name: 'smtp', entry: 'scripts/chaos/smtp-sink.ts', args: [JSON.stringify(sinkOptions)], env: baseEnv });
    this.api = this.supervise({
      name: 'api',
      entry: 'src/commands/api.ts',
      env: {
        ...baseEnv,
        PORT: String(apiPort),
        HOST: '127.0.0.1',
        RATE_LIMIT_AUTH_PER_MINUTE: '100000',
        SIGNUPS_PER_ADDRESS_PER_DAY: '1000000',
        SHUTDOWN_TIMEOUT_SECONDS: '5',
        LOG_LEVEL: 'warn',
      },
    });
    if (withEvents) await this.startEvents(databaseUrl, baseEnv);
    // The workers' topics, asked while the SMTP server and the API start (each start loads
    // TypeScript through tsx: seconds apiece on a busy machine, so not one after the other).
    const workerEnv = {
      ...baseEnv,
      ...WORKER_ENV,
      ...WEBHOOK_ENV,
      SMTP_URL: `smtp://127.0.0.1:${this.smtpPort}?ignoreTLS=true`,
      ...this.ev?.env,
    };
    this.handledTopics = await listTopics(workerEnv);
    await Promise.all([this.waitSmtpUp(), this.waitApiUp()]);
    this.say(`API on ${apiPort}, SMTP server on ${this.smtpPort}; worker handles: ${this.handledTopics.join(', ')}`);
    this.workers = [0, 1].map((i) =>
      this.supervise({
        name: `worker-${i}`,
        entry: 'src/commands/drain-outbox.ts',
        env: workerEnv,
        onLine: (line) => {
          if (line.includes('"outbox handler outcome"')) this.lastWorkerActivity[i] = Date.now();
        },
      }),
    );
    await this.ev?.startConsumer();
  }

  private async startDatabase(outboxWrites: 'table' | 'wal'): Promise<string> {
    // The run's folder holds the data and the server's log (kept with the others after a failure).
    this.postgres = await startThrowawayPostgres({
      name: 'chaos',
      dir: path.join(this.dir, 'pg'),
      logFile: path.join(this.logs, 'postgres.log'),
      ...(outboxWrites === 'wal' ? { settings: { wal_level: 'logical' } } : {}),
    });
    const databaseUrl = await this.postgres.createDatabase('stayhub');
    registerOutboxHooks();
    await runMigrations(databaseUrl);
    if (outboxWrites === 'wal') await ensureWalSlot(databaseUrl, 'stayhub_outbox');
    this.admin = createPool(databaseUrl, { max: 3, applicationName: 'stayhub-chaos' });
    this.say(`embedded Postgres on ${this.postgres.pg.opts.port}, migrated`);
    return databaseUrl;
  }

  /** nats-server (store and logs under the run's folder); the consumer gets the workers' settings, so both compute the same stream configuration. */
  private async startEvents(databaseUrl: string, baseEnv: NodeJS.ProcessEnv): Promise<void> {
    const ev = await startEventsChaos({
      databaseUrl,
      root: ROOT,
      dir: path.join(this.dir, 'events'),
      env: { ...baseEnv, ...WORKER_ENV },
      log: this.say,
    });
    this.ev = ev;
    this.say(
      `nats-server -js, ${ev.nats.size} nodes as one cluster on ${ev.nats.servers.join(',')}; the workers relay into stream ${ev.env.EVENTS_STREAM} at ${ev.env.EVENTS_REPLICAS} replicas`,
    );
  }

  /** Starts a process under supervision (`entry` from the repository's root), its log named after it in the run's logs folder. */
  private supervise(spec: Omit<ChildSpec, 'logFile'>): Supervised {
    const s = new Supervised({ ...spec, entry: path.join(ROOT, spec.entry), logFile: path.join(this.logs, `${spec.name}.log`) });
    this.children.push(s);
    s.start();
    return s;
  }

  /** Up = answering HTTP at all (a 503 while Postgres restarts still means the process is up). */
  waitApiUp = async () =>
    void (await until('API not ready', 60_000, async () => (await fetch(`${this.apiUrl}/health`)).status > 0 || undefined));
  waitSmtpUp = async () => void (await until('SMTP server not ready', 30_000, async () => (await portOpen(this.smtpPort)) || undefined));

  /** Every process the run supervises, with the exits it did not cause (the consumer and nats-server too). */
  unplannedExits() {
    const supervised = [...this.children, ...(this.ev ? [this.ev.consumer] : [])].map((c) => [c.spec.name, c.unplannedExits] as const);
    const natsServer = this.ev ? [['nats-server', this.ev.nats.unplannedExits] as const] : [];
    return [...supervised, ...natsServer];
  }

  /** Stops everything, the processes first; the folder stays (the caller decides). */
  async stop(): Promise<void> {
    await Promise.all(this.children.map((c) => c.stop(8_000).catch(() => {})));
    await this.ev?.stop().catch(() => {});
    await this.admin?.end().catch(() => {});
    await this.postgres?.stop().catch(() => {});
  }
}
