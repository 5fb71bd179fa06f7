import type { FastifyError, FastifyInstance } from 'fastify';
import type pg from 'pg';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { AppError, type FieldError } from '../../errors.ts';
import { isDatabaseUnavailable, isDataException } from '../../db/pg-errors.ts';
import { isPoolExhausted } from '../../db/pool-load.ts';
import { problem, sendProblem } from '../problem.ts';

/** Fastify's own client-error codes, mapped to ours. */
const FASTIFY_CLIENT_ERRORS: Record<string, Parameters<typeof problem>[0]> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_request',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'bad_request',
  FST_ERR_CTP_INVALID_JSON_BODY: 'bad_request',
};

/**
 * The one place an error becomes a response. Client errors (< 500) tell the client what is wrong;
 * anything else is logged in full and answered with a generic 500 that reveals nothing.
 */
export function registerErrorHandler(app: FastifyInstance, opts: { pool?: pg.Pool } = {}) {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof AppError) {
      if (err.status >= 500) request.log.error({ err }, 'request failed');
      return sendProblem(reply, problem(err.code, err.message, err.errors));
    }

    if (hasZodFastifySchemaValidationErrors(err)) {
      const where = err.validationContext ?? 'body';
      const errors: FieldError[] = err.validation.map((v) => {
        const path = v.instancePath.replace(/^\//, '').replace(/\//g, '.');
        return { path: path ? `${where}.${path}` : where, message: v.message ?? 'is invalid' };
      });
      return sendProblem(reply, problem('validation_failed', undefined, errors));
    }

    const mapped = err.code ? FASTIFY_CLIENT_ERRORS[err.code] : undefined;
    if (mapped) return sendProblem(reply, problem(mapped, err.message));
    if (err instanceof SyntaxError || err.statusCode === 400) return sendProblem(reply, problem('bad_request', err.message));
    if (err.statusCode === 429) return sendProblem(reply, problem('rate_limited'));

    // Postgres rejecting a value the validation should have caught (any SQLSTATE 22xxx): still the
    // client's input, never a 500 or a 503.
    if (isDataException(err)) {
      request.log.warn({ err }, 'database rejected input that passed validation');
      return sendProblem(reply, problem('bad_request', 'A value in the request is not valid'));
    }

    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      return sendProblem(reply, problem('bad_request', err.message));
    }
    // Every connection busy for the whole wait while the pool kept handing them back: the database
    // is up, the service has more work than it can take (src/db/pool-load.ts). Saying "database
    // unavailable" here sent operators after an outage that was not there.
    if (opts.pool && isPoolExhausted(err, opts.pool)) {
      request.log.warn({ err }, 'no database connection free in time');
      return sendProblem(reply, problem('overloaded', 'Every database connection stayed busy; retry shortly'));
    }
    // The database restarting or unreachable is an outage, not a bug: 503 tells the client to come
    // back (with the same Idempotency-Key), where a 500 would say the request itself broke something.
    if (isDatabaseUnavailable(err)) {
      request.log.warn({ err }, 'database unavailable');
      return sendProblem(reply, problem('service_unavailable', 'The database is unavailable; retry shortly'));
    }
    request.log.error({ err }, 'unhandled error');
    return sendProblem(reply, problem('internal_error'));
  });

  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem('not_found', `No route for ${request.method} ${request.url.split('?')[0]}`)),
  );
}
