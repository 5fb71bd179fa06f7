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

export function isRetryableTransactionError(err: unknown): boolean {
  const code = pgError(err)?.code;
  return code === PG.deadlockDetected || code === PG.serializationFailure;
}

export function isPgError(err: unknown, code: string, constraint?: string): boolean {
  const e = pgError(err);
  return !!e && e.code === code && (constraint === undefined || e.constraint === constraint);
}
