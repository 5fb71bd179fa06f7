import pino, { type Logger, type LoggerOptions } from 'pino';

/**
 * Paths that may carry secrets. Redaction is the safety net; the first line of defence is never
 * putting a password, token or email address into a log call.
 */
export const REDACT_PATHS = [
  'password',
  '*.password',
  'token',
  '*.token',
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'authorization',
  '*.authorization',
  'smtpUrl',
  'databaseUrl',
];

/**
 * drizzle's DrizzleQueryError carries the query's parameters, in `params` and in its message and
 * stack ("params: …"). Those can be emails, password hashes or token hashes: never log them.
 */
function serializeError(err: unknown) {
  const s = pino.stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
  if (!s || typeof s !== 'object') return s;
  delete s.params;
  for (const k of ['message', 'stack'] as const) {
    if (typeof s[k] === 'string') s[k] = (s[k] as string).replace(/\nparams: [^\n]*/g, '\nparams: [redacted]');
  }
  return s;
}

export function loggerOptions(level: string, name?: string): LoggerOptions {
  return {
    level,
    name,
    serializers: { err: serializeError },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    // Pretty output only for a person at a terminal; machines get one JSON object a line.
    transport: process.stdout.isTTY ? { target: 'pino-pretty', options: { colorize: true } } : undefined,
  };
}

export function createLogger(level: string, name?: string, destination?: pino.DestinationStream): Logger {
  const opts = loggerOptions(level, name);
  return destination ? pino({ ...opts, transport: undefined }, destination) : pino(opts);
}

export type { Logger };
