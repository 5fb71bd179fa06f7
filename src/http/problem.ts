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

export function sendProblem(reply: FastifyReply, p: Problem) {
  return reply
    .status(p.status)
    .type('application/problem+json')
    .send({ ...p, instance: reply.request.url.split('?')[0] });
}
