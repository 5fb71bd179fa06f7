import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import * as auth from '../../users/auth.service.ts';
import { authResponse, loginBody, registerBody, userResponse } from '../../users/users.schemas.ts';
import { currentUser } from '../plugins/auth.ts';
import type { AppContext } from '../context.ts';

export const authRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps = { db: ctx.db.db, sessionTtlHours: ctx.config.SESSION_TTL_HOURS };
  // Per client address: slows password guessing and mass sign-ups; the limit applies to failures too.
  const rateLimit = { max: ctx.config.RATE_LIMIT_AUTH_PER_MINUTE, timeWindow: '1 minute' };

  app.post(
    '/auth/register',
    { config: { rateLimit }, schema: { tags: ['auth'], body: registerBody, response: { 201: authResponse } } },
    async (request, reply) => reply.status(201).send(await auth.register(deps, request.body)),
  );

  app.post(
    '/auth/login',
    { config: { rateLimit }, schema: { tags: ['auth'], body: loginBody, response: { 200: authResponse } } },
    async (request) => auth.login(deps, request.body),
  );

  app.post(
    '/auth/logout',
    { onRequest: app.authenticate, schema: { tags: ['auth'], response: { 204: z.null() } } },
    async (request, reply) => {
      await auth.logout(deps, request.bearerToken!);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/me',
    { onRequest: app.authenticate, schema: { tags: ['auth'], response: { 200: userResponse } } },
    async (request) => auth.toUserResponse(currentUser(request)),
  );
};
