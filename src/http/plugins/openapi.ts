import { z } from 'zod';
import { ERRORS, type ErrorCode } from '../../errors.ts';

/**
 * What a route that requires a signed-in user declares in its schema, so that /docs sends the
 * token given under "Authorize" (swagger-ui sends it only to operations that declare it). The
 * scheme itself is declared once, in app.ts.
 */
export const bearerAuth = [{ bearer: [] as string[] }];

/** Client errors any route with a JSON body can answer: malformed JSON or UTF-8, too large, not JSON. */
export const BODY_PROBLEMS = ['bad_request', 'payload_too_large', 'unsupported_media_type'] as const satisfies ErrorCode[];

/**
 * One problem+json response (src/http/problem.ts) whose `code` is one of `codes`, all of one status.
 *
 * The enums are for the reader only: this schema also serializes the reply at run time, and an
 * error answer must never turn into a 500 because a code was left off a route's list. Loose, so
 * that a member added to Problem later is not stripped on the way out.
 */
function problemSchema(status: number, codes: ErrorCode[]) {
  return z.looseObject({
    type: z.string(),
    title: z.string(),
    status: z.number().meta({ enum: [status] }),
    code: z.string().meta({ enum: codes }),
    detail: z.string().optional(),
    instance: z.string().optional(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  });
}

/**
 * The `response` entries for the errors a route answers, grouped by status, each described by
 * its codes and their titles from the catalogue: `response: { 200: ok, ...problems('not_found') }`.
 */
export function problems(...codes: readonly ErrorCode[]) {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of new Set(codes)) {
    const { status } = ERRORS[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const responses: Record<
    number,
    { description: string; content: { 'application/problem+json': { schema: ReturnType<typeof problemSchema> } } }
  > = {};
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) {
    responses[status] = {
      description: list.map((code) => `- \`${code}\`: ${ERRORS[code].title}`).join('\n'),
      content: { 'application/problem+json': { schema: problemSchema(status, list) } },
    };
  }
  return responses;
}
