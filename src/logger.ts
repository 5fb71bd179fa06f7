import pino, { type Logger, type LoggerOptions } from 'pino';
import { traceLogFields } from './telemetry/tracing.ts';

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

const REDACTED = '[redacted]';
const PARAMS_MARK = '\nparams: ';
/** Shorter parameter values ("1", "EUR", "t") are not worth hunting for, and would mangle the text. */
const MIN_PARAM_LENGTH = 4;
const MAX_DEPTH = 8;

type Dict = Record<string, unknown>;
const isErrorLike = (v: unknown): v is Dict & { message: string } =>
  typeof v === 'object' && v !== null && typeof (v as Dict).message === 'string';
const isPlain = (v: unknown): v is Dict =>
  typeof v === 'object' && v !== null && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);

/** What must not survive into the log: each drizzle message with its parameters, and the parameter values. */
interface Leaks {
  messages: Map<string, string>;
  values: Set<string>;
}

/**
 * Walks the raw error, its causes and any error it holds under another key. drizzle's
 * DrizzleQueryError writes the query's parameters into its message ("Failed query: …\nparams: a,b")
 * and so into its stack, and keeps them in `params`. A parameter can hold anything (a newline, a
 * NUL, a fake stack frame), so nothing is parsed out of the text: the whole message is known here,
 * and is swapped for its head wherever it appears.
 */
function collectLeaks(err: unknown, leaks: Leaks, seen = new Set<unknown>(), depth = 0) {
  if (!isErrorLike(err) || seen.has(err) || depth > MAX_DEPTH) return;
  seen.add(err);
  const at = err.message.indexOf(PARAMS_MARK);
  if (at >= 0) leaks.messages.set(err.message, `${err.message.slice(0, at)}${PARAMS_MARK}${REDACTED}`);
  if (Array.isArray(err.params)) {
    for (const p of err.params) {
      const s = typeof p === 'string' ? p : p === null || p === undefined ? '' : typeof p === 'object' ? safeJson(p) : String(p);
      if (s.length >= MIN_PARAM_LENGTH) leaks.values.add(s);
    }
  }
  for (const key of new Set([...Object.keys(err), 'cause'])) collectLeaks(err[key], leaks, seen, depth + 1);
}

function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? '';
  } catch {
    return '';
  }
}

function scrubText(s: string, leaks: Leaks): string {
  let out = s;
  // Longest first: a message can contain another one (messageWithCauses joins them).
  for (const [raw, head] of [...leaks.messages].sort((a, b) => b[0].length - a[0].length)) out = out.split(raw).join(head);
  // A "params:" the exact match missed (a message rewritten on the way): drop everything after it.
  out = out.replace(/\nparams: (?!\[redacted\])[\s\S]*$/, `${PARAMS_MARK}${REDACTED}`);
  for (const v of leaks.values) out = out.split(v).join(REDACTED);
  return out;
}

/**
 * A pg error's `detail` repeats the values: "Key (email)=(eve@x) already exists.", "Failing row
 * contains (1, …, scrypt$…)." Keep which columns, drop what was in them.
 */
function scrubDetail(detail: string): string {
  const eq = detail.indexOf('=(');
  if (eq >= 0) return `${detail.slice(0, eq)}=${REDACTED}`;
  const paren = detail.indexOf('(');
  return paren >= 0 ? `${detail.slice(0, paren)}${REDACTED}` : detail;
}

/** A copy of the serialized error with every string scrubbed and every `params` dropped. */
function scrub(v: unknown, leaks: Leaks, depth = 0): unknown {
  if (typeof v === 'string') return scrubText(v, leaks);
  if (depth > MAX_DEPTH) return v;
  if (Array.isArray(v)) return v.map((x) => scrub(x, leaks, depth + 1));
  if (!isPlain(v) && !isErrorLike(v)) return v;
  const out: Dict = {};
  for (const [k, x] of Object.entries(v)) {
    if (k === 'params') continue;
    out[k] = k === 'detail' && typeof x === 'string' ? scrubDetail(scrubText(x, leaks)) : scrub(x, leaks, depth + 1);
  }
  return out;
}

/**
 * Errors are logged in full (type, message, stack, causes, pg code and constraint), except the
 * query's bound parameters: emails, password hashes, token hashes. Never logged, whatever they
 * contain.
 */
export function serializeError(err: unknown): unknown {
  const s = pino.stdSerializers.err(err as Error) as unknown;
  if (!s || typeof s !== 'object') return s;
  const leaks: Leaks = { messages: new Map(), values: new Set() };
  collectLeaks(err, leaks);
  return scrub(s, leaks);
}

export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** `auto`: pretty for a person at a terminal, one JSON object a line anywhere else (CI, containers, files). */
export function resolveLogFormat(format: LogFormat, stdoutIsTTY: boolean = Boolean(process.stdout.isTTY)): 'json' | 'pretty' {
  if (format === 'auto') return stdoutIsTTY ? 'pretty' : 'json';
  return format;
}

/** pino-pretty, in pino's transport thread so formatting never blocks the event loop. */
const prettyTransport = {
  target: 'pino-pretty',
  // Colours follow pino-pretty's own check (a TTY on stdout, or FORCE_COLOR; NO_COLOR turns them off).
  // singleLine: a line's fields beside its message, not one terminal line each (a request was six).
  options: { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true },
};

export function loggerOptions(level: string, name?: string, format: LogFormat = 'auto'): LoggerOptions {
  return {
    level,
    name,
    serializers: { err: serializeError },
    redact: { paths: REDACT_PATHS, censor: REDACTED },
    // trace_id and span_id on every line written inside a span (nothing when tracing is off).
    mixin: traceLogFields,
    transport: resolveLogFormat(format) === 'pretty' ? prettyTransport : undefined,
  };
}

export interface CreateLoggerOptions {
  /** `LOG_FORMAT` from the config. */
  format?: LogFormat;
  /** Tests: write JSON lines here instead of stdout. */
  destination?: pino.DestinationStream;
}

export function createLogger(level: string, name?: string, out?: pino.DestinationStream | CreateLoggerOptions): Logger {
  const isStream = typeof (out as pino.DestinationStream | undefined)?.write === 'function';
  const o = isStream ? { destination: out as pino.DestinationStream } : ((out as CreateLoggerOptions | undefined) ?? {});
  const opts = loggerOptions(level, name, o.format);
  return o.destination ? pino({ ...opts, transport: undefined }, o.destination) : pino(opts);
}

export type { Logger };
