import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../db/client.ts';
import { isPgError, PG } from '../db/pg-errors.ts';
import { AppError } from '../errors.ts';
import type { UserRole } from '../db/schema.ts';
import { DUMMY_HASH_PROMISE, hashPassword, verifyPassword } from './password.ts';
import { sessionCacheFor } from './session-cache.ts';
import * as repo from './users.repository.ts';
import type { LoginBody, RegisterBody, UserResponse } from './users.schemas.ts';

export interface AuthDeps {
  db: Db;
  sessionTtlHours: number;
}

/** Opaque bearer tokens; only their SHA-256 is stored. */
export const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');

export function toUserResponse(u: repo.UserRow): UserResponse {
  return { id: u.publicId, email: u.email, name: u.name, role: u.role, createdAt: u.createdAt.toISOString() };
}

async function openSession(deps: AuthDeps, userId: number): Promise<string> {
  const token = randomBytes(32).toString('base64url');
  const expiresAt = new Date(Date.now() + deps.sessionTtlHours * 3_600_000);
  await repo.insertSession(deps.db, { tokenHash: hashToken(token), userId, expiresAt });
  return token;
}

export async function createUser(db: Db, input: { email: string; password: string; name: string; role: UserRole }): Promise<repo.UserRow> {
  const passwordHash = await hashPassword(input.password);
  try {
    return await repo.insertUser(db, { email: input.email, name: input.name, role: input.role, passwordHash });
  } catch (err) {
    if (isPgError(err, PG.uniqueViolation, 'users_email_lower_key')) throw new AppError('email_taken');
    throw err;
  }
}

export async function register(deps: AuthDeps, body: RegisterBody) {
  const user = await createUser(deps.db, body);
  return { user: toUserResponse(user), token: await openSession(deps, user.id) };
}

/** Unknown email and wrong password get the same answer, after the same amount of work. */
export async function login(deps: AuthDeps, body: LoginBody) {
  const user = await repo.findUserByEmail(deps.db, body.email);
  const ok = await verifyPassword(body.password, user?.passwordHash ?? (await DUMMY_HASH_PROMISE));
  if (!user || !ok) throw new AppError('invalid_credentials');
  return { user: toUserResponse(user), token: await openSession(deps, user.id) };
}

export async function logout(deps: AuthDeps, token: string): Promise<void> {
  const tokenHash = hashToken(token);
  await repo.revokeSession(deps.db, tokenHash);
  // After the revoke. A lookup of this token that read the session just before the revoke can
  // still put it back, but only for SESSION_CACHE_MS: the bound the cache promises.
  sessionCacheFor(deps.db).delete(tokenHash);
}

/** The user behind a live session token; remembered for at most a second (see session-cache.ts). */
export async function authenticate(deps: AuthDeps, token: string): Promise<repo.UserRow | undefined> {
  const tokenHash = hashToken(token);
  const cache = sessionCacheFor(deps.db);
  const cached = cache.get(tokenHash);
  if (cached) return cached;
  const found = await repo.findUserBySessionHash(deps.db, tokenHash);
  if (!found) return undefined;
  cache.set(tokenHash, found.user, found.expiresAt);
  return found.user;
}
