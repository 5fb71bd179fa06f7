import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../errors.ts';
import * as auth from '../../users/auth.service.ts';
import { authResponse, loginBody, registerBody, userResponse } from '../../users/users.schemas.ts';
import { currentUser } from '../plugins/auth.ts';
import { BODY_PROBLEMS, bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext } from '../context.ts';

/*
 * Accounts created per client address per day (ADR 0039): the per-minute limit alone let one
 * address make 14,400 accounts a day, and every account is an owner of its own in the outbox's
 * turns. Counted once an account is made, so a mistyped form or a taken email costs nothing; per
 * API process (the plugin's memory store), like the per-minute limit; an IPv6 address by its /64
 * (the plugin's default subnet).
 */
function signupsPerDay(app: FastifyInstance, max: number) {
  const today = app.createRateLimit({ max, timeWindow: '1 day' });
  return {
    async ensureRoom(request: FastifyRequest, reply: FastifyReply): Promise<void> {
      const seen = await today(request, { increment: false });
      if (seen.isAllowed || seen.remaining > 0) return;
      reply.header('retry-after', seen.ttlInSeconds);
      throw new AppError('rate_limited', 'Too many accounts from this address today');
    },
    count: (request: FastifyRequest) => today(request),
  };
}

export const authRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps = { db: ctx.db.db, sessionTtlHours: ctx.config.SESSION_TTL_HOURS };
  // Per client address: slows password guessing and mass sign-ups; the limit applies to failures too.
  const rateLimit = { max: ctx.config.RATE_LIMIT_AUTH_PER_MINUTE, timeWindow: '1 minute' };
  const signups = signupsPerDay(app, ctx.config.SIGNUPS_PER_ADDRESS_PER_DAY);

  app.post(
    '/auth/register',
    {
      config: { rateLimit },
      schema: {
        summary: 'Create an account (guest or host) and sign in',
        tags: ['auth'],
        body: registerBody,
        response: {
          201: authResponse.describe('The new account, signed in: its user and a bearer token'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'email_taken', 'rate_limited'),
        },
      },
    },
    async (request, reply) => {
      await signups.ensureRoom(request, reply);
      const created = await auth.register(deps, request.body);
      await signups.count(request);
      return reply.status(201).send(created);
    },
  );

  app.post(
    '/auth/login',
    {
      config: { rateLimit },
      schema: {
        summary: 'Sign in with email and password: a bearer token',
        tags: ['auth'],
        body: loginBody,
        response: {
          200: authResponse.describe('Signed in: the user and a bearer token'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'invalid_credentials', 'rate_limited'),
        },
      },
    },
    async (request) => auth.login(deps, request.body),
  );

  app.post(
    '/auth/logout',
    {
      onRequest: app.authenticate,
      schema: {
        summary: 'Sign out: the token stops working',
        tags: ['auth'],
        security: bearerAuth,
        response: { 204: z.null().describe('Signed out: the token no longer works'), ...problems(...BODY_PROBLEMS, 'unauthorized') },
      },
    },
    async (request, reply) => {
      await auth.logout(deps, request.bearerToken!);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/me',
    {
      onRequest: app.authenticate,
      schema: {
        summary: 'The signed-in user',
        tags: ['auth'],
        security: bearerAuth,
        response: { 200: userResponse.describe('The signed-in user'), ...problems('unauthorized') },
      },
    },
    async (request) => auth.toUserResponse(currentUser(request)),
  );
};
