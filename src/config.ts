import { z } from 'zod';
import { applyEnvFile } from './env-file.ts';
import {
  bool,
  DAY,
  HOUR,
  int,
  MAX_RETENTION_DAYS,
  MINUTE,
  natsUrl,
  optionalUrl,
  retentionDays,
  WAIT_MAX_MS,
  withoutEmptyValues,
  YEAR_HOURS,
} from './config-fields.ts';
import { LOG_FORMATS } from './logger.ts';
import { POOLERS } from './db/pooler.ts';

/**
 * Every setting the API, the worker and the scripts read, parsed once at start-up.
 * `.env.example` lists the same variables with the same defaults; keep the two in step.
 * Nothing here branches on NODE_ENV: behaviour follows these values only.
 */

/** The address the embedded PostgreSQL listens on when DATABASE_URL is not set. */
export const EMBEDDED_DEFAULTS = {
  port: 54320,
  user: 'postgres',
  password: 'stayhub',
  database: 'stayhub',
} as const;

export { MAX_RETENTION_DAYS };

export const defaultDatabaseUrl = (port: number = EMBEDDED_DEFAULTS.port) =>
  `postgres://${EMBEDDED_DEFAULTS.user}:${EMBEDDED_DEFAULTS.password}@127.0.0.1:${port}/${EMBEDDED_DEFAULTS.database}`;

/** The OTLP encodings this code is tested with (grpc would need the SDK's gRPC exporter, not shipped tested). */
const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;

const envSchema = z.object({
  // --- database
  DATABASE_URL: optionalUrl.optional(),
  EMBEDDED_PG_PORT: int(1, 65535).default(EMBEDDED_DEFAULTS.port),
  EMBEDDED_PG_DIR: z.string().default('.data/postgres'),
  DB_POOL_MAX: int(1, 200).default(10),
  /** What stands between this process and PostgreSQL (DATABASE_URL and SEARCH_DATABASE_URL): src/db/pooler.ts. */
  DATABASE_POOLER: z.enum(POOLERS).default('none'),

  // --- HTTP API
  PORT: int(0, 65535).default(3000),
  HOST: z.string().default('127.0.0.1'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** auto: pretty on a terminal, JSON lines elsewhere. */
  LOG_FORMAT: z.enum(LOG_FORMATS).default('auto'),
  BODY_LIMIT_BYTES: int(1024, 64 * 1024 * 1024).default(64 * 1024),
  CORS_ORIGINS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    ),
  RATE_LIMIT_AUTH_PER_MINUTE: int(1, 100_000).default(10),
  /** Accounts created per client address in a day (src/http/routes/auth.ts, ADR 0039); the per-minute limit alone allowed 14,400. */
  SIGNUPS_PER_ADDRESS_PER_DAY: int(1, 1_000_000).default(20),
  TRUST_PROXY: bool.default(false),

  // --- slow clients (src/http/slow-clients.ts, ADR 0041): a client that stalls is cut off, so that
  // it holds a socket for a bounded time and never a slot of admission control.
  /** The whole request, headers and body, must arrive within this; else 408 and the socket closed. */
  HTTP_REQUEST_TIMEOUT_MS: int(1000, 300_000).default(10_000),
  /** The headers must arrive within this (at most HTTP_REQUEST_TIMEOUT_MS). */
  HTTP_HEADERS_TIMEOUT_MS: int(500, 300_000).default(5_000),
  /** An idle keep-alive connection is closed after this (above a load balancer's usual 60 s). */
  HTTP_KEEP_ALIVE_TIMEOUT_MS: int(1000, 600_000).default(72_000),
  /** Requests of one client address whose body is still arriving; past it, 429 and the socket closed. 0: no cap. */
  HTTP_MAX_UPLOADS_PER_ADDRESS: int(0, 100_000).default(64),
  /** /health and /metrics query on their own connections, off the busy pool: this bounds a connect and a statement. */
  HEALTH_DB_TIMEOUT_MS: int(50, 10_000).default(500),

  // --- load shedding: refuse work early (503 overloaded + Retry-After) rather than queue it
  // (src/http/plugins/load-shedding.ts, ADR 0034). Reads (GET) are refused first, writes later;
  // each threshold 0 turns that signal off for that class.
  LOAD_SHEDDING: bool.default(true),
  LOAD_SHED_RETRY_AFTER_SECONDS: int(1, 3600).default(2),
  /** A refusal is answered after this pause: clients that retry at once cannot fill the API with refusals. */
  LOAD_SHED_REFUSAL_DELAY_MS: int(0, 10_000).default(1000),
  /** Mean event-loop delay over the last quarter second. Writes: off (ADR 0034: refusals alone keep it up). */
  LOAD_SHED_READS_EVENT_LOOP_DELAY_MS: int(0, 60_000).default(50),
  LOAD_SHED_WRITES_EVENT_LOOP_DELAY_MS: int(0, 60_000).default(0),
  /** The wait for a database connection a request let in now can expect (requests in flight, answered lately at what rate). */
  LOAD_SHED_READS_POOL_WAIT_MS: int(0, 60_000).default(100),
  LOAD_SHED_WRITES_POOL_WAIT_MS: int(0, 60_000).default(250),
  /** PENDING outbox messages (the worker's backlog), sampled every LOAD_SHED_OUTBOX_CHECK_MS. */
  LOAD_SHED_READS_OUTBOX_PENDING: int(0, 1_000_000_000).default(50_000),
  LOAD_SHED_WRITES_OUTBOX_PENDING: int(0, 1_000_000_000).default(200_000),
  LOAD_SHED_OUTBOX_CHECK_MS: int(100, 600_000).default(5000),

  // --- business rules
  SERVICE_FEE_PERCENT: int(0, 100).default(12),
  SESSION_TTL_HOURS: int(1, YEAR_HOURS).default(24 * 30),
  IDEMPOTENCY_TTL_HOURS: int(1, YEAR_HOURS).default(24),

  // --- outbox worker
  LEASE_SECONDS: int(1, DAY).default(60),
  BACKOFF_BASE_SECONDS: z.coerce.number().positive().max(HOUR).default(2),
  BACKOFF_MAX_SECONDS: z.coerce.number().positive().max(DAY).default(256),
  BACKOFF_JITTER: bool.default(true),
  MAX_ATTEMPTS: int(1, 100).default(8),
  UNKNOWN_TOPIC_RECHECK_SECONDS: int(1, DAY).default(60),
  POLL_INTERVAL_MS: int(10, HOUR * 1000).default(1000),
  /**
   * Where the API's enqueue writes a message: `table` (a row, the default) or `wal` (a message in the
   * WAL whose row the worker makes; needs wal_level=logical and a replication slot, ADR 0056).
   */
  OUTBOX_WRITES: z.enum(['table', 'wal']).default('table'),
  /** The replication slot of OUTBOX_WRITES=wal: one per database (slot names are the server's). */
  OUTBOX_SLOT: z
    .string()
    .regex(/^[a-z0-9_]{1,63}$/, 'lower-case letters, digits and _ only, at most 63')
    .default('stayhub_outbox'),
  /** The first and smallest claim; a backlog doubles it, claim after claim, up to WORKER_MAX_BATCH_SIZE. */
  WORKER_BATCH_SIZE: int(1, 1000).default(20),
  WORKER_MAX_BATCH_SIZE: int(1, 10_000).default(1000),
  WORKER_CONCURRENCY: int(1, 256).default(8),
  SHUTDOWN_TIMEOUT_SECONDS: int(1, HOUR).default(30),
  OUTBOX_RETENTION_DAYS: retentionDays.default(7),
  /** How often the worker deletes old DONE messages, expired Idempotency-Keys and ended sessions. */
  HOUSEKEEPING_INTERVAL_SECONDS: int(1, DAY).optional(),
  /** The old name of HOUSEKEEPING_INTERVAL_SECONDS, still read (with a warning at start-up). */
  OUTBOX_PURGE_INTERVAL_SECONDS: int(1, DAY).optional(),
  WORKER_METRICS_PORT: int(0, 65535).optional(),

  // --- mail
  SMTP_URL: optionalUrl.optional(),
  SMTP_TIMEOUT_MS: int(100, WAIT_MAX_MS).default(10_000),
  MAIL_DIR: z.string().default('var/mail'),
  MAIL_FROM: z.string().default('StayHub <no-reply@stayhub.test>'),

  // --- search index
  SEARCH_DATABASE_URL: optionalUrl.optional(),
  SEARCH_STATEMENT_TIMEOUT_MS: int(10, WAIT_MAX_MS).default(2000),
  SEARCH_POOL_MAX: int(1, 100).default(4),
  /** How long a host's save waits for the direct index write before answering anyway (the worker repairs). */
  SEARCH_DIRECT_TIMEOUT_MS: int(0, 10_000).default(250),

  // --- events for other services (NATS JetStream; src/events/). Unset NATS_URL: no relay.
  NATS_URL: natsUrl.optional(),
  EVENTS_STREAM: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('STAYHUB_EVENTS'),
  /** Subjects are `<prefix>.<topic>`, e.g. stayhub.booking.created; the stream takes `<prefix>.>`. */
  EVENTS_SUBJECT_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/)
    .default('stayhub'),
  /** Comma-separated topics to relay; empty = every topic. */
  EVENTS_TOPICS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    ),
  EVENTS_MAX_AGE_SECONDS: int(MINUTE, MAX_RETENTION_DAYS * DAY).default(7 * 24 * 3600),
  EVENTS_REPLICAS: int(1, 5).default(1),
  /** Unset: computed from the outbox's retry span (src/events/stream.ts). Set: must not be shorter. */
  EVENTS_DUPLICATE_WINDOW_SECONDS: int(1, 365 * DAY).optional(),
  /** The worker lowers the live stream's max age to EVENTS_MAX_AGE_SECONDS (drops older events at once); off: refused at start. */
  EVENTS_ALLOW_SHORTER_MAX_AGE: bool.default(false),
  /** How often the worker compares the live stream's settings with its own and brings them back. */
  EVENTS_SETTINGS_CHECK_INTERVAL_SECONDS: int(1, 3600).default(30),
  /** How often the worker reconciles the stream with the outbox (src/events/reconcile.ts); 0 = never. */
  EVENTS_RECONCILE_INTERVAL_SECONDS: int(0, 86_400).default(300),
  EVENTS_PUBLISH_TIMEOUT_MS: int(100, WAIT_MAX_MS).default(5000),
  /**
   * Relay: publishes out and no reply at all for this long, and NATS is taken to be hung (the
   * circuit opens before any timeout, src/events/circuit.ts). Capped at half the publish timeout.
   */
  EVENTS_STALL_MS: int(50, WAIT_MAX_MS).default(500),
  /** Consumers: messages per pull, ack wait, deliveries before a consumer-side dead letter. */
  EVENTS_BATCH_SIZE: int(1, 1000).default(100),
  EVENTS_ACK_WAIT_SECONDS: int(1, HOUR).default(30),
  EVENTS_MAX_DELIVER: int(1, 1000).default(5),
  /**
   * How often the earnings consumer audits its ledger against the outbox (src/events/earnings/audit.ts):
   * booking events the stream skipped or lost for the group are counted from the bookings table. 0 = never.
   */
  EVENTS_EARNINGS_AUDIT_INTERVAL_SECONDS: int(0, 86_400).default(60),
  /** The earnings ledger's consumer group (its durable consumer's name, and its inbox's). */
  EVENTS_EARNINGS_GROUP: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('earnings'),
  /** If set, `npm run consume:earnings` serves Prometheus metrics (lag) on this port. */
  EVENTS_METRICS_PORT: int(0, 65535).optional(),
  /** How long GET /admin/events/groups waits for NATS (connect and reads) before answering 503. */
  EVENTS_ADMIN_TIMEOUT_MS: int(100, 60_000).default(2000),

  // --- webhooks to hosts' systems (src/webhooks/), sent by the worker
  /** Seconds between attempts after each failure; its length + 1 is the number of attempts. */
  WEBHOOK_RETRY_SCHEDULE_SECONDS: z
    .string()
    .default('5,300,1800,7200,18000,36000,36000')
    .transform((v, ctx) => {
      const parts = v.split(',').map((s) => s.trim());
      const delays = parts.map(Number);
      if (parts.length > 100 || parts.some((p) => !/^\d+(\.\d+)?$/.test(p)) || delays.some((d) => !(d > 0 && d <= 7 * DAY))) {
        ctx.addIssue({
          code: 'custom',
          message: 'must be a comma-separated list of at most 100 numbers of seconds, each above 0 and at most 7 days (604800)',
        });
        return z.NEVER;
      }
      return delays;
    }),
  /** Connect + request + response, per attempt. */
  WEBHOOK_TIMEOUT_MS: int(100, 120_000).default(15_000),
  WEBHOOK_CONNECT_TIMEOUT_MS: int(100, 120_000).default(5_000),
  /** Deliveries in flight per worker process, over all endpoints. */
  WEBHOOK_CONCURRENCY: int(1, 1000).default(32),
  /** Deliveries in flight per endpoint per worker process: what one slow endpoint can hold. */
  WEBHOOK_ENDPOINT_CONCURRENCY: int(1, 100).default(4),
  /** After a rotation, the old secret keeps signing beside the new one for this long. */
  WEBHOOK_SECRET_OVERLAP_HOURS: z.coerce.number().min(0).max(YEAR_HOURS).default(24),
  /** An endpoint with nothing but failures for this long is disabled and its host emailed. */
  WEBHOOK_DISABLE_AFTER_HOURS: z.coerce.number().positive().max(YEAR_HOURS).default(120),
  /** Development and tests only: lets endpoints point at loopback and private addresses. */
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: bool.default(false),
  /** Keep connections to endpoints open between attempts, per checked address (ADR 0036); false: a new connection per attempt. */
  WEBHOOK_KEEP_ALIVE: bool.default(true),
  /** Delivered and failed deliveries, their attempts and events are deleted after this many days. */
  WEBHOOK_RETENTION_DAYS: int(1, MAX_RETENTION_DAYS).default(30),
  /** Deliveries in flight per host (all its endpoints together) per worker process: what one host's slow servers can hold. */
  WEBHOOK_HOST_CONCURRENCY: int(1, 1000).default(8),
  /**
   * Slots only a host with nothing in flight may take (per worker process; at most
   * WEBHOOK_CONCURRENCY - 1 take effect): other hosts' hanging endpoints cannot fill them (ADR 0040).
   */
  WEBHOOK_IDLE_OWNER_SLOTS: int(0, 256).default(4),
  /** Endpoints one host may register. */
  WEBHOOK_MAX_ENDPOINTS_PER_HOST: int(1, 1000).default(10),
  /** Test events, retries and recovers a host may ask for per minute (each its own budget; a burst of as many). */
  WEBHOOK_MANUAL_SENDS_PER_MINUTE: int(1, 10_000).default(10),
  /** Attempts kept per delivery, the newest; older ones are deleted as new ones are made. */
  WEBHOOK_ATTEMPTS_KEPT: int(1, 1000).default(10),
  /** Ports below 1024 that endpoints may use besides 80 and 443 (comma-separated); 1024 and up are always allowed. */
  WEBHOOK_EXTRA_PORTS: z
    .string()
    .default('')
    .transform((v, ctx) => {
      const parts = v
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
      if (parts.some((p) => !/^\d+$/.test(p) || Number(p) < 1 || Number(p) > 1023)) {
        ctx.addIssue({ code: 'custom', message: 'must be a comma-separated list of ports from 1 to 1023' });
        return z.NEVER;
      }
      return parts.map(Number);
    }),
  /** Send each webhook request with the delivery's `traceparent` (when tracing is on; never a tracestate); off: hosts see none. */
  WEBHOOK_TRACE_CONTEXT: bool.default(true),
  /** The longest a webhook portal link may work (minutes); a host asks for less, 60 by default. */
  WEBHOOK_PORTAL_LINK_MAX_MINUTES: int(5, 10_080).default(1440),

  // --- tracing (OpenTelemetry; docs/observability.md). The SDK reads these itself; they are
  // checked here so a typo fails at start like any other setting. No exporter: tracing is off.
  OTEL_TRACES_EXPORTER: z
    .string()
    .trim()
    .transform((v) => (v === '' ? undefined : v))
    .pipe(
      z
        .string()
        .regex(/^(otlp|console|none)(,(otlp|console|none))*$/, 'otlp, console or none (comma-separated)')
        .optional(),
    )
    .optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: optionalUrl.optional(),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: optionalUrl.optional(),
  OTEL_EXPORTER_OTLP_PROTOCOL: z.enum(OTLP_PROTOCOLS).optional(),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: z.enum(OTLP_PROTOCOLS).optional(),
  /** Unset: stayhub-<process> (stayhub-api, stayhub-worker, stayhub-earnings, …). */
  OTEL_SERVICE_NAME: z.string().trim().min(1).optional(),
  OTEL_TRACES_SAMPLER: z
    .enum(['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'])
    .optional(),
  OTEL_TRACES_SAMPLER_ARG: z.coerce.number().min(0).max(1).optional(),
  /** A request's own traceparent/tracestate become its parent and decide its sampling; off: a new trace, the caller's span a link (ADR 0044). */
  OTEL_TRUST_INCOMING_TRACE: bool.default(false),
});

/**
 * Read beside the settings, so not unknown in `.env`: docker-compose reads the file too, for the
 * NATS users' passwords (docker-compose.yml, nats/accounts.conf); Node and terminals read the rest.
 */
const READ_ELSEWHERE = [
  'ENV_FILE',
  'NATS_API_PASSWORD',
  'NATS_WORKER_PASSWORD',
  'NATS_EARNINGS_PASSWORD',
  'NODE_OPTIONS',
  'NODE_ENV',
  'TZ',
  'FORCE_COLOR',
  'NO_COLOR',
];

// Every entry point and script reads its settings through this module, so loading `.env` here,
// as the module is first imported, means none of them can forget it. The real environment wins.
// A key of the file that neither the schema nor READ_ELSEWHERE knows is warned about (stderr).
applyEnvFile(process.env, process.cwd(), undefined, new Set([...Object.keys(envSchema.shape), ...READ_ELSEWHERE]));

export type Env = z.infer<typeof envSchema>;

export type Config = Readonly<
  Omit<Env, 'DATABASE_URL' | 'HOUSEKEEPING_INTERVAL_SECONDS' | 'OUTBOX_PURGE_INTERVAL_SECONDS'> & {
    DATABASE_URL: string;
    HOUSEKEEPING_INTERVAL_SECONDS: number;
    /** Settings read under an old name: one line each, for the process to log at start-up. */
    deprecations: readonly string[];
    /** True when DATABASE_URL was not given and the embedded server is the database. */
    usesEmbeddedDatabase: boolean;
    SEARCH_DATABASE_URL: string;
  }
>;

export class ConfigError extends Error {
  constructor(public readonly problems: string[]) {
    super(`Invalid configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
  }
}

/** Reads are refused before writes: a read threshold above its write threshold would turn that round. */
function shedThresholdsInverted(e: Env): string[] {
  const pairs = [
    ['LOAD_SHED_READS_EVENT_LOOP_DELAY_MS', 'LOAD_SHED_WRITES_EVENT_LOOP_DELAY_MS'],
    ['LOAD_SHED_READS_POOL_WAIT_MS', 'LOAD_SHED_WRITES_POOL_WAIT_MS'],
    ['LOAD_SHED_READS_OUTBOX_PENDING', 'LOAD_SHED_WRITES_OUTBOX_PENDING'],
  ] as const;
  return pairs
    .filter(([r, w]) => e[w] > 0 && (e[r] === 0 || e[r] > e[w]))
    .map(([r, w]) => `${r}: must be above 0 and at most ${w} (${e[w]}), so reads are refused before writes`);
}

/** Parses the environment; throws one ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = envSchema.safeParse(withoutEmptyValues(env));
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  }
  const { OUTBOX_PURGE_INTERVAL_SECONDS: oldInterval, ...e } = parsed.data;
  const inverted = shedThresholdsInverted(e);
  if (inverted.length) throw new ConfigError(inverted);
  if (e.HTTP_HEADERS_TIMEOUT_MS > e.HTTP_REQUEST_TIMEOUT_MS) {
    // Node refuses it too, but only once the server is made: say so with the other settings.
    throw new ConfigError([`HTTP_HEADERS_TIMEOUT_MS: must be at most HTTP_REQUEST_TIMEOUT_MS (${e.HTTP_REQUEST_TIMEOUT_MS})`]);
  }
  const databaseUrl = e.DATABASE_URL ?? defaultDatabaseUrl(e.EMBEDDED_PG_PORT);
  const deprecations: string[] = [];
  if (oldInterval !== undefined) {
    deprecations.push(
      e.HOUSEKEEPING_INTERVAL_SECONDS === undefined
        ? 'OUTBOX_PURGE_INTERVAL_SECONDS is read as HOUSEKEEPING_INTERVAL_SECONDS, its new name: rename it'
        : 'OUTBOX_PURGE_INTERVAL_SECONDS is ignored: HOUSEKEEPING_INTERVAL_SECONDS, its new name, is set',
    );
  }
  return Object.freeze({
    ...e,
    HOUSEKEEPING_INTERVAL_SECONDS: e.HOUSEKEEPING_INTERVAL_SECONDS ?? oldInterval ?? 3600,
    deprecations: Object.freeze(deprecations),
    DATABASE_URL: databaseUrl,
    usesEmbeddedDatabase: e.DATABASE_URL === undefined,
    SEARCH_DATABASE_URL: e.SEARCH_DATABASE_URL ?? databaseUrl,
  });
}
