import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError } from '../../errors.ts';
import type { UserRow } from '../../users/users.repository.ts';
import { authenticate, type AuthDeps } from '../../users/auth.service.ts';
import type { UserRole } from '../../db/schema.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by `app.authenticate`; routes that require a user read it through `currentUser`. */
    user: UserRow | null;
    bearerToken: string | null;
  }
  interface FastifyInstance {
    /** onRequest hook: 401 unless a live bearer token is presented. Runs before body validation. A function, not a method: routes hand it on. */
    authenticate: (request: FastifyRequest) => Promise<void>;
    /** onRequest hook factory: 401 without a token, 403 for a role not listed. */
    requireRole(...roles: UserRole[]): (request: FastifyRequest) => Promise<void>;
  }
}

export function bearerToken(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (!header) return null;
  const match = /^Bearer ([A-Za-z0-9_-]{20,200})$/.exec(header);
  return match ? match[1]! : null;
}

export function currentUser(request: FastifyRequest): UserRow {
  if (!request.user) throw new AppError('unauthorized');
  return request.user;
}

export function registerAuth(app: FastifyInstance, deps: AuthDeps) {
  app.decorateRequest('user', null);
  app.decorateRequest('bearerToken', null);
  const authenticateRequest = async (request: FastifyRequest) => {
    const token = bearerToken(request);
    const user = token ? await authenticate(deps, token) : undefined;
    if (!user) throw new AppError('unauthorized', 'A valid bearer token is required');
    request.user = user;
    request.bearerToken = token;
  };
  app.decorate('authenticate', authenticateRequest);
  app.decorate('requireRole', (...roles: UserRole[]) => async (request: FastifyRequest) => {
    await authenticateRequest(request);
    if (!roles.includes(request.user!.role)) throw new AppError('forbidden');
  });
}
