/**
 * PostgreSQL error codes the application acts on. A pg DatabaseError reaches us either directly
 * or as the `.cause` of drizzle's DrizzleQueryError; `pgError` finds it in either shape.
 */
export const PG = {
  uniqueViolation: '23505',
  foreignKeyViolation: '23503',
  checkViolation: '23514',
  exclusionViolation: '23P01',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  queryCanceled: '57014',
  adminShutdown: '57P01',
  invalidTextRepresentation: '22P02',
  datetimeFieldOverflow: '22008',
} as const;

export interface PgErrorLike {
  code: string;
  constraint?: string;
  detail?: string;
  message: string;
}

export function pgError(err: unknown): PgErrorLike | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return e as PgErrorLike;
  }
  return undefined;
}

/** Socket-level failures (Node's codes) on the way to the database. */
const NETWORK_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
/** pg and pg-pool raise these without a code when a connection dies or cannot be had in time. */
const CONNECTION_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error)/;

/**
 * True when the database could not be reached or went away mid-query (restart, failover,
 * pg_terminate_backend, pool exhausted for connectionTimeoutMillis): SQLSTATE class 08
 * (connection exception), 57P01-57P03 (shutdown, crash, not yet accepting), 53300 (too many
 * connections), or a socket error. Not the request's fault, and worth retrying later: the API
 * answers 503, not 500. Found by the chaos run (a Postgres restart gave clients 500s).
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === 'string') {
      if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300') return true;
      if (NETWORK_ERRORS.has(code)) return true;
    }
    if (typeof message === 'string' && CONNECTION_MESSAGES.test(message)) return true;
  }
  return false;
}

/**
 * SQLSTATE class 22, "data exception": PostgreSQL refused a value (out of range, not a number, bad
 * date, invalid byte sequence, NUL in text…). Such a value can only come from the request, so it
 * is the client's fault: a 400, never a 5xx. Validation should have refused it first; this is the
 * net under it, for every route.
 */
export function isDataException(err: unknown): boolean {
  return pgError(err)?.code.startsWith('22') ?? false;
}

export function isRetryableTransactionError(err: unknown): boolean {
  const code = pgError(err)?.code;
  return code === PG.deadlockDetected || code === PG.serializationFailure;
}

export function isPgError(err: unknown, code: string, constraint?: string): boolean {
  const e = pgError(err);
  return !!e && e.code === code && (constraint === undefined || e.constraint === constraint);
}
