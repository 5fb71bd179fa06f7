import type { FastifyReply } from 'fastify';
import { ERRORS, type ErrorCode, type FieldError } from '../errors.ts';

/** RFC 9457 problem details, with our stable `code` member that clients branch on. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  code: ErrorCode;
  detail?: string;
  instance?: string;
  errors?: FieldError[];
}

export function problem(code: ErrorCode, detail?: string, errors?: FieldError[]): Problem {
  const { status, title } = ERRORS[code];
  return {
    type: `https://stayhub.example/problems/${code.replace(/_/g, '-')}`,
    title,
    status,
    code,
    ...(detail && detail !== title ? { detail } : {}),
    ...(errors?.length ? { errors } : {}),
  };
}

/**
 * Seconds a 503 asks the client to wait when its sender named none. Every 503 says when to come
 * back: a client that retries at once is what keeps an overloaded or restarting service down.
 */
export const DEFAULT_RETRY_AFTER_SECONDS = 1;

export function sendProblem(reply: FastifyReply, p: Problem) {
  if (p.status === 503 && !reply.hasHeader('retry-after')) reply.header('retry-after', String(DEFAULT_RETRY_AFTER_SECONDS));
  return reply
    .status(p.status)
    .type('application/problem+json')
    .send({ ...p, instance: reply.request.url.split('?')[0] });
}
