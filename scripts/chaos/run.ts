import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFile, execFileSync } from 'node:child_process';
import { createPool } from '../../src/db/client.ts';
import { EmbeddedPostgres, ensureDatabase } from '../../src/db/embedded.ts';
import { runMigrations } from '../../src/db/migrate.ts';
import { lifelineEnv, onParentGone } from '../../src/process/lifeline.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { parseFlags, wholeNumber } from '../bench/lib/cli.ts';
import { ApiClient } from './client.ts';
import { startEventsChaos, type EventsChaos } from './events/events-chaos.ts';
import { NATS_INSTALL_HINT, natsServerAvailable } from './events/nats-cluster.ts';
import type { EventsFigures } from './events/observed.ts';
import { FaultInjector } from './faults/injector.ts';
import { planFaults } from './faults/plan.ts';
import type { InjectedFault } from './faults/types.ts';
import { clientRecords, gather, type Gathered } from './gather.ts';
import { Load } from './load.ts';
import { Supervised } from './processes.ts';
import { renderMarkdown } from './report.ts';
import { Rng } from './rng.ts';
import type { SinkOptions, SinkRecord } from './smtp-sink.ts';
import { ChaosWebhooks, WEBHOOK_ENV, type WebhookFigures } from './webhooks.ts';
import { checkResult, EVENT_CHECKS } from './checks.ts';
import type { JudgeInput } from './evidence.ts';
import { FAULT_KINDS, type FaultKind } from './fault-kinds.ts';
import { judge, type Verdict } from './verdict.ts';
import { pendingCount, pendingOf } from './outbox-queries.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelaySeconds } from '../../src/outbox/index.ts';

/*
 * `npm run chaos -- [--duration 60] [--seed N] [--out DIR] [--concurrency 6] [--keep]` (USAGE below)
 *
 * Runs the real system on this machine — embedded Postgres, the API process, two outbox worker
 * processes, a real SMTP server in a process of its own and, when nats-server is installed, the
 * events path (the workers relay into a NATS JetStream of the run's own, the earnings consumer
 * reads it: scripts/chaos/events/) — puts load on it while injecting the
 * faults drawn from --seed, lets the workers drain, then judges the run (gather.ts collects the
 * evidence, verdict.ts judges it) and writes chaos-results.json and chaos-results.md to --out
 * (default var/chaos/SEED/, git-ignored). Exit code 0 only if every invariant held; 1 if one
 * broke; 2 for bad flags or a harness failure.
 *
 * Everything is on loopback, on free ports, in a temporary folder: it never touches the
 * developer's database or `npm start`'s ports. The folder (with every process's log) is deleted
 * after a passing run and kept, with its path printed, after a failing one.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

// Worker settings that make retries fit in a short run. The retry window (sum of the backoff
// delays before a message dies) must be longer than any SMTP outage the schedule draws.
const WORKER_ENV = {
  LEASE_SECONDS: '5',
  BACKOFF_BASE_SECONDS: '0.2',
  BACKOFF_MAX_SECONDS: '2',
  MAX_ATTEMPTS: '12',
  POLL_INTERVAL_MS: '250',
  SMTP_TIMEOUT_MS: '3000',
  SHUTDOWN_TIMEOUT_SECONDS: '5',
  // The relay's publish gives up well inside the lease: with NATS down, an attempt fails in 1 s
  // and backs off, instead of holding its claim until the lease runs out.
  EVENTS_PUBLISH_TIMEOUT_MS: '1000',
};
const MAIL_FROM = 'StayHub <no-reply@stayhub.test>';
/** The right-hand side of every Message-ID the workers send (the domain of MAIL_FROM). */
const MAIL_DOMAIN = 'stayhub.test';

/** Smallest total of backoff delays before a message dies (jitter can only shorten a delay by half). */
function retryWindowMs(): number {
  const base = Number(WORKER_ENV.BACKOFF_BASE_SECONDS);
  const max = Number(WORKER_ENV.BACKOFF_MAX_SECONDS);
  let total = 0;
  for (let n = 1; n < Number(WORKER_ENV.MAX_ATTEMPTS); n++) total += backoffDelaySeconds(n, { baseSeconds: base, maxSeconds: max }) / 2;
  return total * 1000;
}

interface Flags {
  durationSeconds: number;
  seed: number;
  out: string;
  concurrency: number;
  keep: boolean;
}

const USAGE = `usage: npm run chaos -- [--duration SECONDS] [--seed N] [--out DIR] [--concurrency N] [--keep]

Runs embedded Postgres, the API, two outbox workers, an SMTP server and (with nats-server) the
events relay and earnings consumer, puts load on them while injecting faults drawn from the seed,
lets the workers drain and checks that nothing was lost. Exit 0: every invariant held; 1: one
broke; 2: bad flags or a harness failure.

  --duration SECONDS   seconds of load, 10 to 86400 (default 60)
  --seed N             seed of the faults, the load and the SMTP refusals, 0 to 4294967295
                       (default: random, printed)
  --out DIR            where to write chaos-results.json and chaos-results.md (default: var/chaos/SEED)
  --concurrency N      client loops putting load on the API, 1 to 1000 (default 6)
  --keep               keep the run's temporary folder (logs, data) even when it passes
  -h, --help           print this and exit

Environment:
  CI=true              fail (exit 2) instead of skipping the events part when nats-server is missing
  CHAOS_CODE_COMMIT    the commit run, when the tree is not a git checkout
`;

function readFlags(argv: string[]): Flags {
  const values = parseFlags(
    'chaos',
    USAGE,
    {
      duration: { type: 'string', default: '60' },
      seed: { type: 'string' },
      out: { type: 'string' },
      concurrency: { type: 'string', default: '6' },
      keep: { type: 'boolean', default: false },
    },
    argv,
  );
  const num = (name: string, v: string, min: number, max: number) => wholeNumber('chaos', USAGE, name, v, min, max);
  // The generator keeps 32 bits of the seed: a larger one would repeat a smaller one's run.
  const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : num('seed', values.seed, 0, 2 ** 32 - 1);
  return {
    durationSeconds: num('duration', values.duration, 10, 86_400),
    seed,
    out: path.resolve(values.out ?? path.join(root, 'var', 'chaos', String(seed))),
    concurrency: num('concurrency', values.concurrency, 1, 1_000),
    keep: values.keep,
  };
}

async function waitFor(what: string, probe: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if (await probe()) return;
    } catch {
      /* not yet */
    }
    await sleep(100);
  }
  throw new Error(`${what} not ready within ${timeoutMs} ms`);
}

export interface ChaosResults {
  ok: boolean;
  seed: number;
  durationSeconds: number;
  startedAt: string;
  wallSeconds: number;
  machine: { cpus: number; node: string };
  /** The code that ran: HEAD, and whether src/ had uncommitted changes. */
  code: { commit: string | null; srcDirty: boolean | null };
  settings: { worker: typeof WORKER_ENV; concurrency: number; tempFailRate: number; bounceRecipients: number; retryWindowSeconds: number };
  /** The events path: covered (relay into JetStream, earnings consumer, their faults and checks) or skipped, and why. */
  events: { covered: true; figures: EventsFigures | null; consumerKills: number } | { covered: false; skipped: string };
  /** Emails' pace during NATS outages against outside them (null: the events part did not run). */
  emailPace: Verdict['emailPace'];
  /** The webhook receivers: endpoints, events owed and received, requests per receiver. */
  webhooks: WebhookFigures | null;
  /** The verdict's checks: `ok` is exactly "every one of these held". */
  checks: Verdict['checks'];
  /** What the run had to contain for its checks to mean anything (scaled to the duration). */
  minimums: Verdict['minimums'];
  figures: {
    bookingsMade: number;
    bookingsInDatabase: Verdict['bookings'];
    load: Load['figures'];
    requests: number;
    clientRetries: number;
    responses: Record<string, number>;
    /** Faults with evidence of their effect, by kind (the only ones counted). */
    faults: Record<FaultKind, number>;
    faultsPlanned: Record<FaultKind, number>;
    /** Faults carried out with no effect seen (not counted). */
    faultsWithoutEffect: number;
    workerKillsMidHandlers: number;
    mail: Verdict['mail'];
    outbox: Verdict['outbox'];
    drainSecondsAfterLoad: number | null;
    secondsFromLastFaultToSteadyState: number | null;
    maxOldestPendingAgeSeconds: number;
    maxPending: number;
    /** When the oldest-pending age peaked, seconds from the start of the load. */
    maxOldestPendingAtSeconds: number | null;
    slowestMessages: Gathered['slowest'];
    /** Every 10 s of the run: PENDING count and oldest pending age (the max within the window). */
    timeline: { atSeconds: number; pending: number; oldestAgeSeconds: number }[];
    unplannedExits: Record<string, { at: string; code: number | null; signal: string | null; lastLines: string[] }[]>;
  };
  faults: Array<Omit<InjectedFault, 'startedAt' | 'endedAt'> & { atSeconds: number; seconds: number }>;
  handledTopics: string[];
}

function gitVersion(): { commit: string | null; srcDirty: boolean | null } {
  try {
    const git = (...args: string[]) =>
      execFileSync('git', args, { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim();
    return { commit: git('rev-parse', 'HEAD'), srcDirty: git('status', '--porcelain', '--', 'src', 'migrations') !== '' };
  } catch {
    // Not a git checkout (a `git archive` snapshot): the caller may say which commit it is.
    return { commit: process.env.CHAOS_CODE_COMMIT ?? null, srcDirty: process.env.CHAOS_CODE_COMMIT ? false : null };
  }
}

/** The samples in 10-second windows (max of each), for the results file. */
function timeline(samples: { at: number; pending: number; oldestAge: number }[], start: number) {
  const windows = new Map<number, { pending: number; oldestAge: number }>();
  for (const s of samples) {
    const w = Math.floor((s.at - start) / 10_000) * 10;
    const cur = windows.get(w) ?? { pending: 0, oldestAge: 0 };
    windows.set(w, { pending: Math.max(cur.pending, s.pending), oldestAge: Math.max(cur.oldestAge, s.oldestAge) });
  }
  return [...windows.entries()]
    .sort(([a], [b]) => a - b)
    .map(([atSeconds, v]) => ({ atSeconds, pending: v.pending, oldestAgeSeconds: Math.round(v.oldestAge * 10) / 10 }));
}

async function main(): Promise<number> {
  const flags = readFlags(process.argv.slice(2));
  const t0 = Date.now();
  const codeVersion = gitVersion();
  const say = (msg: string) => process.stdout.write(`[chaos +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
  const rng = new Rng(flags.seed);
  const faultRng = rng.fork('faults');
  const loadRng = rng.fork('load');
  const sinkRng = rng.fork('smtp');
  const webhooksRng = rng.fork('webhooks');
  say(`seed ${flags.seed}, duration ${flags.durationSeconds} s, results to ${flags.out}`);

  // The events path needs nats-server. Without it a developer's run says it skips that part; CI
  // (CI=true) must not pass by checking less.
  const withEvents = natsServerAvailable();
  if (!withEvents) {
    if (/^(1|true)$/i.test(process.env.CI ?? '')) {
      process.stderr.write(`chaos: ${NATS_INSTALL_HINT}. CI=true: refusing to skip the events part.\n`);
      return 2;
    }
    say(`SKIPPING THE EVENTS PART (JetStream relay, earnings consumer, their faults and checks): ${NATS_INSTALL_HINT}`);
  }

  // --- the stage: a temporary folder the `postgres` user can reach, free ports
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-chaos-'));
  chmodSync(dir, 0o755);
  const logs = path.join(dir, 'logs');
  mkdirSync(logs);
  const [pgPort, apiPort, smtpPort] = [await freePort(), await freePort(), await freePort()];
  const postgres = new EmbeddedPostgres({
    dataDir: path.join(dir, 'pg'),
    port: pgPort,
    user: 'postgres',
    password: 'chaos',
    logFile: path.join(logs, 'postgres.log'),
  });
  const children: Supervised[] = [];
  let admin: ReturnType<typeof createPool> | undefined;
  let sampler: NodeJS.Timeout | undefined;
  let hooks: ChaosWebhooks | undefined;
  let ev: EventsChaos | undefined;

  const cleanup = async () => {
    clearInterval(sampler);
    await Promise.all(children.map((c) => c.stop(8_000).catch(() => {})));
    await ev?.stop().catch(() => {});
    await admin?.end().catch(() => {});
    await postgres.stop().catch(() => {});
  };
  let interrupted = false;
  const interrupt = (why: string) => {
    if (interrupted) return;
    interrupted = true;
    say(`${why}: stopping everything`);
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', () => interrupt('interrupted'));
  // Whoever started the run (npm, a test) gone: stop the stack rather than leave it running. If
  // this process is SIGKILLed instead, its children see it go (processes.ts), and PostgreSQL's and
  // nats-server's watchdogs stop them (src/db/orphan-watchdog.ts).
  onParentGone(() => interrupt('the process that started the run is gone'), { name: 'chaos' });

  try {
    await postgres.initialise();
    await postgres.start();
    await ensureDatabase(postgres.url, 'stayhub');
    const databaseUrl = postgres.urlFor('stayhub');
    await runMigrations(databaseUrl);
    admin = createPool(databaseUrl, { max: 3, applicationName: 'stayhub-chaos' });
    say(`embedded Postgres on ${pgPort}, migrated`);

    const bounceEmails = [`bounce-1-${flags.seed}@chaos.test`, `bounce-2-${flags.seed}@chaos.test`];
    const tempFailRate = 0.1;
    const recordFile = path.join(dir, 'smtp-received.jsonl');
    writeFileSync(recordFile, '');

    const baseEnv: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      LOG_LEVEL: 'info',
      MAIL_FROM,
      // The webhook receivers listen on 127.0.0.1: the API registers and the workers call them.
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    };

    // --- the SMTP server
    const sinkOptions: SinkOptions = {
      port: smtpPort,
      recordFile,
      seed: sinkRng.int(1, 2 ** 30),
      tempFailRate,
      rejectRecipients: bounceEmails,
      latencyMs: [5, 40],
    };
    const smtp = new Supervised({
      name: 'smtp',
      entry: path.join(root, 'scripts/chaos/smtp-sink.ts'),
      args: [JSON.stringify(sinkOptions)],
      env: baseEnv,
      cwd: root,
      logFile: path.join(logs, 'smtp.log'),
    });
    children.push(smtp);
    smtp.start();
    const waitSmtpUp = () => waitFor('SMTP server', () => portOpen(smtpPort), 30_000);

    // --- the API
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const api = new Supervised({
      name: 'api',
      entry: path.join(root, 'src/http/server.ts'),
      env: {
        ...baseEnv,
        PORT: String(apiPort),
        HOST: '127.0.0.1',
        RATE_LIMIT_AUTH_PER_MINUTE: '1000000',
        SHUTDOWN_TIMEOUT_SECONDS: '5',
        LOG_LEVEL: 'warn',
      },
      cwd: root,
      logFile: path.join(logs, 'api.log'),
    });
    children.push(api);
    api.start();
    // Up = answering HTTP at all (a 503 while Postgres restarts still means the process is up).
    const waitApiUp = () => waitFor('API', async () => (await fetch(`${apiUrl}/health`)).status > 0, 60_000);

    // --- the events path: nats-server (store and logs under the run's folder); the consumer gets
    // the workers' settings, so both compute the same stream configuration
    if (withEvents) {
      ev = await startEventsChaos({ databaseUrl, root, dir: path.join(dir, 'events'), env: { ...baseEnv, ...WORKER_ENV }, log: say });
      say(
        `nats-server -js, ${ev.nats.size} nodes as one cluster on ${ev.nats.servers.join(',')}; the workers relay into stream ${ev.env.EVENTS_STREAM} at ${ev.env.EVENTS_REPLICAS} replicas`,
      );
    }

    // --- the workers' topics, asked while the SMTP server and the API start (each start loads
    // TypeScript through tsx: seconds apiece on a busy machine, so not one after the other)
    const workerEnv = { ...baseEnv, ...WORKER_ENV, ...WEBHOOK_ENV, SMTP_URL: `smtp://127.0.0.1:${smtpPort}?ignoreTLS=true`, ...ev?.env };
    const topicsOut = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        ['--import', 'tsx', 'src/worker/drain-outbox.ts', '--list-topics'],
        { cwd: root, env: { ...workerEnv, ...lifelineEnv() } },
        (err, stdout) =>
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- an ExecFileException is an Error; its type (built with Omit) hides it
          err ? reject(err) : resolve(stdout),
      ),
    );
    const handledTopics = topicsOut
      .split('\n')
      .map((l) => l.split(':')[0]!.trim())
      .filter(Boolean);
    await Promise.all([waitSmtpUp(), waitApiUp()]);
    say(`API on ${apiPort}, SMTP server on ${smtpPort}; worker handles: ${handledTopics.join(', ')}`);
    const lastWorkerActivity = [0, 0];
    const workers = [0, 1].map(
      (i) =>
        new Supervised({
          name: `worker-${i}`,
          entry: path.join(root, 'src/worker/drain-outbox.ts'),
          env: workerEnv,
          cwd: root,
          logFile: path.join(logs, `worker-${i}.log`),
          onLine: (line) => {
            if (line.includes('"outbox handler outcome"')) lastWorkerActivity[i] = Date.now();
          },
        }),
    );
    children.push(...workers);
    workers.forEach((w) => w.start());
    await ev?.startConsumer();

    // --- the outbox, sampled every second (oldest PENDING age of topics the worker handles)
    const samples: { at: number; pending: number; oldestAge: number }[] = [];
    sampler = setInterval(() => {
      pendingOf(admin!, handledTopics)
        .then((row) => samples.push({ at: Date.now(), pending: row.pending, oldestAge: row.age ?? 0 }))
        .catch(() => {}); // Postgres restarting: no sample
    }, 1_000);

    // --- the load and the faults
    const client = new ApiClient(apiUrl);
    const load = new Load({
      api: client,
      rng: loadRng,
      hosts: 6,
      guests: 16,
      bounceEmails,
      concurrency: flags.concurrency,
      thinkMs: [20, 120],
      runTag: String(flags.seed),
    });
    await load.setup();
    // Webhook receivers for some of the hosts (scripts/chaos/webhooks.ts), registered before any booking.
    hooks = new ChaosWebhooks(webhooksRng);
    await hooks.start();
    await hooks.register(client, load.hosts());
    say(`set up ${load.users.length} users and ${load.properties.length} properties; webhook receivers: flaky, down, slow`);

    const durationMs = flags.durationSeconds * 1000;
    const maxOutageMs = Math.floor(retryWindowMs() / 2);
    const plan = planFaults(faultRng, {
      durationMs,
      workers: workers.length,
      maxSmtpOutageMs: maxOutageMs,
      events: ev ? { maxNatsOutageMs: maxOutageMs } : undefined,
    });
    const events = ev;
    const injector = new FaultInjector({
      workers,
      api,
      smtp,
      postgres,
      admin,
      lastWorkerActivity,
      waitApiUp,
      waitSmtpUp,
      events: events && {
        killConsumer: (ms) => events.killConsumer(ms),
        natsOutage: (ms) => events.natsOutage(ms),
        deleteStream: () => events.deleteStream(),
        forgeEvent: (kind, pick) => events.forgeEvent(kind, pick),
        killNatsNode: (target, ms) => events.killNatsNode(target, ms),
        wipeNatsNode: (target) => events.wipeNatsNode(target),
      },
      // Longer than the longest backoff (BACKOFF_MAX_SECONDS) plus a publish timeout: every message
      // gets an attempt between an SMTP outage and a NATS one.
      downstreamGapMs: maxOutageMs,
      log: say,
    });
    const loadStart = Date.now();
    say(`load for ${flags.durationSeconds} s with ${plan.length} faults planned`);
    injector.start(plan);
    // The "down" receiver refuses connections for a window in the middle of the load.
    hooks.scheduleDownWindow(Math.round(durationMs * 0.3), Math.min(30_000, Math.round(durationMs * 0.2)));
    await load.run(durationMs);
    const loadEnd = Date.now();
    say(`load done: ${load.figures.bookingsCreated} bookings, ${load.figures.cancellations} cancellations; waiting for faults in progress`);
    await injector.settle();
    // Every process up again (a fault may have ended with one still restarting).
    await waitApiUp();
    await waitSmtpUp();
    workers.forEach((w) => w.start());

    // --- drain: wait until nothing the worker handles is PENDING (bounded)
    const drainDeadline = Date.now() + Math.max(120_000, durationMs);
    let drainedAt: number | null = null;
    while (Date.now() < drainDeadline) {
      try {
        if ((await pendingCount(admin, handledTopics)) === 0) {
          drainedAt = Date.now();
          break;
        }
      } catch {
        /* retry */
      }
      await sleep(250);
    }
    say(drainedAt ? `drained ${((drainedAt - loadEnd) / 1000).toFixed(1)} s after the load` : 'NOT drained within the bound');
    clearInterval(sampler);

    // --- webhooks: every delivery sent (bounded), then their checks
    const webhooksDrained = await hooks.drain(admin, Date.now() + 120_000);
    const webhookChecks = await hooks.check(admin);
    if (hooks.figures) {
      const f = hooks.figures;
      say(
        `webhooks${webhooksDrained ? '' : ' (NOT drained)'}: ${f.owed} owed to ${f.endpoints} endpoints, ${f.receivedValid} received signed; requests flaky ${f.requests.flaky}, down ${f.requests.down}, slow ${f.requests.slow}`,
      );
    }

    // --- the events path: the consumer reads to the end of the stream, then its checks
    let eventsInput: JudgeInput['events'] = null;
    if (ev) {
      const caughtUp: string[] = [];
      await ev.finish().catch((err: Error) => caughtUp.push(err.message));
      eventsInput = { checks: [checkResult(EVENT_CHECKS.caughtUp, caughtUp), ...(await ev.check())] };
      const f = ev.figures;
      if (f)
        say(
          `events: ${f.bookingEventsInOutbox} booking events in the outbox, ${f.bookingMessagesInStream} in the stream (${f.goneWithDeletedStream} gone with ${f.streamDeletions} deleted stream(s)), ${f.ledgerLines} ledger lines, ${f.deadLetters} consumer dead letters, ${f.forgedRefused} of ${f.forged} forged events refused`,
        );
    }

    // --- checks (the API is still up for the clients' look-ups)
    const records = readFileSync(recordFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as SinkRecord);
    // The clients' own count of abandoned requests, taken before the look-ups add their own.
    const clientsGaveUp = client.gaveUp;
    const gathered = await gather(admin, client, [...load.bookings.values()]);
    // Every process the run supervises, with the exits it did not cause (the consumer and nats-server too).
    const supervised = [...children, ...(ev ? [ev.consumer] : [])].map((c) => [c.spec.name, c.unplannedExits] as const);
    const natsServer = ev ? [['nats-server', ev.nats.unplannedExits] as const] : [];
    const faultsPlanned = Object.fromEntries(FAULT_KINDS.map((k) => [k, plan.filter((f) => f.kind === k).length])) as Record<
      FaultKind,
      number
    >;
    const verdict = judge({
      durationSeconds: flags.durationSeconds,
      mailDomain: MAIL_DOMAIN,
      bounceEmails,
      handledTopics,
      bookings: gathered.bookings,
      outbox: gathered.outbox,
      overlaps: gathered.overlaps,
      records,
      clientBookings: clientRecords(load.bookings.values()),
      lookups: gathered.lookups,
      serverErrors: client.serverErrors,
      clientsGaveUp,
      idempotencyMismatches: load.figures.idempotencyMismatches,
      faultsPlanned,
      faults: injector.done,
      unplannedExits: [...supervised, ...natsServer].flatMap(([name, exits]) =>
        exits.map((e) => ({ process: name, at: e.at, code: e.code, signal: e.signal, lastLines: e.lastLines })),
      ),
      drained: drainedAt !== null,
      events: eventsInput,
      webhooks: { checks: webhookChecks },
    });

    const lastFault = injector.lastFaultEndedAt;
    // Steady state after the last fault: the first sample at which no message is older than 5 s.
    const steady = lastFault ? samples.find((s) => s.at >= lastFault && s.oldestAge <= 5) : undefined;
    const peak = samples.reduce<(typeof samples)[number] | undefined>(
      (best, x) => (!best || x.oldestAge > best.oldestAge ? x : best),
      undefined,
    );
    const responses: Record<string, number> = {};
    for (const [k, n] of [...client.counts.entries()].sort()) responses[k] = n;

    const results: ChaosResults = {
      ok: verdict.ok,
      seed: flags.seed,
      durationSeconds: flags.durationSeconds,
      startedAt: new Date(t0).toISOString(),
      wallSeconds: Math.round((Date.now() - t0) / 1000),
      machine: { cpus: os.cpus().length, node: process.version },
      code: codeVersion,
      settings: {
        worker: WORKER_ENV,
        concurrency: flags.concurrency,
        tempFailRate,
        bounceRecipients: bounceEmails.length,
        retryWindowSeconds: Math.round(retryWindowMs() / 100) / 10,
      },
      events: ev
        ? { covered: true, figures: ev.figures ?? null, consumerKills: ev.consumerKills }
        : { covered: false, skipped: NATS_INSTALL_HINT },
      emailPace: verdict.emailPace,
      webhooks: hooks.figures ?? null,
      checks: verdict.checks,
      minimums: verdict.minimums,
      figures: {
        bookingsMade: load.figures.bookingsCreated,
        bookingsInDatabase: verdict.bookings,
        load: load.figures,
        requests: client.requests,
        clientRetries: client.retries,
        responses,
        faults: verdict.faults.withEvidence,
        faultsPlanned,
        faultsWithoutEffect: verdict.faults.withoutEffect,
        workerKillsMidHandlers: injector.done.filter((f) => f.kind === 'worker-kill' && f.evidence && f.detail.includes('mid-handlers'))
          .length,
        mail: verdict.mail,
        outbox: verdict.outbox,
        drainSecondsAfterLoad: drainedAt ? Math.round((drainedAt - loadEnd) / 100) / 10 : null,
        secondsFromLastFaultToSteadyState: steady && lastFault ? Math.round((steady.at - lastFault) / 100) / 10 : null,
        maxOldestPendingAgeSeconds: Math.round(Math.max(0, ...samples.map((s) => s.oldestAge)) * 10) / 10,
        maxPending: Math.max(0, ...samples.map((s) => s.pending)),
        maxOldestPendingAtSeconds: peak ? Math.round((peak.at - loadStart) / 100) / 10 : null,
        slowestMessages: gathered.slowest,
        timeline: timeline(samples, loadStart),
        unplannedExits: Object.fromEntries(
          [...supervised, ...natsServer].map(([name, exits]) => [name, exits.map((e) => ({ ...e, at: new Date(e.at).toISOString() }))]),
        ),
      },
      faults: injector.done
        .sort((a, b) => a.startedAt - b.startedAt)
        .map(({ startedAt, endedAt, ...f }) => ({
          ...f,
          atSeconds: Math.round((startedAt - loadStart) / 100) / 10,
          seconds: Math.round((endedAt - startedAt) / 100) / 10,
        })),
      handledTopics,
    };

    mkdirSync(flags.out, { recursive: true });
    writeFileSync(path.join(flags.out, 'chaos-results.json'), `${JSON.stringify(results, null, 2)}\n`);
    const md = renderMarkdown(results);
    writeFileSync(path.join(flags.out, 'chaos-results.md'), md);
    process.stdout.write(`\n${md}\n`);

    await cleanup();
    if (results.ok && !flags.keep) rmSync(dir, { recursive: true, force: true });
    else say(`logs and data kept in ${dir}`);
    say(results.ok ? 'PASS: every invariant held' : 'FAIL: an invariant broke (see above)');
    return results.ok ? 0 : 1;
  } catch (err) {
    if (interrupted) return 130;
    process.stderr.write(`chaos: harness failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    await cleanup();
    process.stderr.write(`chaos: logs kept in ${dir}\n`);
    return 2;
  } finally {
    // Whatever happened above: nats-server and the consumer are never left running.
    await ev?.stop().catch(() => {});
    await hooks?.stop().catch(() => {});
  }
}

// main() answers with an exit code; were it to throw, Node would report the rejection and exit 1.
void main().then((code) => process.exit(code));
