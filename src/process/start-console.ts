import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { Config } from '../config.ts';
import { resolveLogFormat } from '../logger.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * What a person at the terminal sees from `npm start`, apart from the logs themselves: the log
 * format the children are told to use, and the banner printed once the API answers.
 */

/**
 * The children write into pipes that this supervisor prefixes with [api] / [worker], so left to
 * `auto` they would always choose JSON. The decision is this process's: pretty when its own
 * stdout is a terminal (or LOG_FORMAT=pretty), JSON otherwise (or LOG_FORMAT=json). Colours go
 * with pretty on a terminal, unless NO_COLOR asks otherwise.
 */
export function childLogEnv(
  config: Pick<Config, 'LOG_FORMAT'>,
  stdoutIsTTY: boolean = Boolean(process.stdout.isTTY),
  env: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const format = resolveLogFormat(config.LOG_FORMAT, stdoutIsTTY);
  const colour = format === 'pretty' && stdoutIsTTY && env.NO_COLOR === undefined && env.FORCE_COLOR === undefined;
  return { LOG_FORMAT: format, ...(colour ? { FORCE_COLOR: '1' } : {}) };
}

type BannerConfig = Pick<Config, 'HOST' | 'PORT' | 'SMTP_URL' | 'MAIL_DIR' | 'NATS_URL' | 'WEBHOOK_ALLOW_PRIVATE_NETWORKS'>;

/** The address a person can type: a wildcard listen address is reached through localhost. */
export function apiBaseUrl(config: Pick<Config, 'HOST' | 'PORT'>): string {
  const host = ['0.0.0.0', '::', ''].includes(config.HOST) ? 'localhost' : config.HOST.includes(':') ? `[${config.HOST}]` : config.HOST;
  return `http://${host}:${config.PORT}`;
}

/** A server's URL without its credentials (SMTP_URL, NATS_URL may carry a password). */
function serverOf(url: string, fallback: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}`;
  } catch {
    return fallback;
  }
}

/** Each server of a NATS_URL (a cluster's are comma-separated) without its credentials. */
const natsServersOf = (url: string) =>
  url
    .split(',')
    .filter((u) => u.trim() !== '')
    .map((u) => serverOf(u.trim(), '(unparseable)'))
    .join(',');

export function bannerLines(config: BannerConfig, cwd: string = process.cwd()): string[] {
  const base = apiBaseUrl(config);
  const mail = config.SMTP_URL
    ? `sent through ${serverOf(config.SMTP_URL, 'the SMTP server in SMTP_URL')}`
    : `written as .eml files to ${path.resolve(cwd, config.MAIL_DIR)}`;
  return [
    'StayHub is ready',
    `  API        ${base}/`,
    `  API docs   ${base}/docs`,
    `  Dashboard  ${base}/admin   (admins only: npm run create-admin -- --email you@example.com --name "You")`,
    `  Emails     ${mail}`,
    ...(config.NATS_URL
      ? [`  Events     NATS_URL=${natsServersOf(config.NATS_URL)} (relay in the worker; earnings consumer running)`]
      : []),
    ...(config.WEBHOOK_ALLOW_PRIVATE_NETWORKS
      ? ['  Webhooks   WEBHOOK_ALLOW_PRIVATE_NETWORKS=true: endpoints may call loopback and private addresses (development only)']
      : []),
    '  Demo data  npm run seed   (a host, a guest, an admin, a dozen properties, some bookings)',
    config.NATS_URL
      ? '  Stop       Ctrl-C (the consumer, the worker and the API finish what they are doing; twice: at once)'
      : '  Stop       Ctrl-C (the worker and the API finish what they are doing; twice: at once)',
  ];
}

/**
 * Prints the banner once GET /health answers 200, i.e. the API listens and reaches the database.
 * Gives up quietly if the API (or one of `others`: the banner says they run) exits first, or the
 * API never answers within `timeoutMs`.
 */
export async function announceWhenReady(opts: {
  config: BannerConfig;
  api: ChildProcess;
  others?: ChildProcess[];
  say: (line: string) => void;
  timeoutMs?: number;
}): Promise<boolean> {
  const { config, api, say } = opts;
  if (config.PORT === 0) return false; // a random port: nothing to poll; the [api] log names it
  const deadline = Date.now() + (opts.timeoutMs ?? 120_000);
  const health = `${apiBaseUrl(config)}/health`;
  const running = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;
  const allRunning = () => running(api) && (opts.others ?? []).every(running);
  while (Date.now() < deadline && allRunning()) {
    const ok = await fetch(health, { signal: AbortSignal.timeout(2000) }).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok && allRunning()) {
      bannerLines(config).forEach((line) => say(line));
      return true;
    }
    await sleep(250);
  }
  return false;
}
