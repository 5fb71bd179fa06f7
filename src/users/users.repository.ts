import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { poolOf, run, statement } from '../db/prepared.ts';
import type { Tx } from '../db/transaction.ts';
import { sessions, users, type UserRole } from '../db/schema.ts';

export type UserRow = typeof users.$inferSelect;

export async function insertUser(
  tx: Tx | Db,
  values: { email: string; name: string; role: UserRole; passwordHash: string },
): Promise<UserRow> {
  const [row] = await tx.insert(users).values(values).returning();
  return row!;
}

export async function findUserByEmail(db: Db | Tx, email: string): Promise<UserRow | undefined> {
  const [row] = await db
    .select()
    .from(users)
    .where(sql`lower(${users.email}) = lower(${email})`);
  return row;
}

export async function insertSession(db: Db | Tx, values: { tokenHash: string; userId: number; expiresAt: Date }) {
  await db.insert(sessions).values(values);
}

/**
 * The user behind a live (unexpired, unrevoked) session token hash, and when that session expires.
 * Runs on every authenticated request: a prepared statement (see db/prepared.ts).
 */
const SESSION_USER = statement(
  'session-user-v1',
  `select u.id, u.public_id, u.email, u.name, u.role, u.password_hash, u.created_at, u.updated_at,
          s.expires_at
     from sessions s join users u on u.id = s.user_id
    where s.token_hash = $1 and s.revoked_at is null and s.expires_at > now()`,
);

export interface SessionUser {
  user: UserRow;
  expiresAt: Date;
}

export async function findUserBySessionHash(db: Db, tokenHash: string): Promise<SessionUser | undefined> {
  const [r] = await run<{
    id: string;
    public_id: string;
    email: string;
    name: string;
    role: UserRole;
    password_hash: string;
    created_at: Date;
    updated_at: Date;
    expires_at: Date;
  }>(poolOf(db), SESSION_USER, [tokenHash]);
  if (!r) return undefined;
  return {
    user: {
      id: Number(r.id), // bigserial in 'number' mode, as drizzle reads it elsewhere
      publicId: r.public_id,
      email: r.email,
      name: r.name,
      role: r.role,
      passwordHash: r.password_hash,
      createdAt: r.created_at,
      updatedAt: r.updated_at,
    },
    expiresAt: r.expires_at,
  };
}

export async function revokeSession(db: Db, tokenHash: string): Promise<void> {
  await db
    .update(sessions)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(sessions.tokenHash, tokenHash), isNull(sessions.revokedAt)));
}

/**
 * Deletes up to `batchSize` expired or revoked sessions (the worker's housekeeping). Either one is
 * refused by the session lookup already, so deleting it changes no answer; only the table stops
 * growing. SKIP LOCKED: two workers sweeping at once never wait on each other.
 */
export async function deleteEndedSessions(db: Db, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from sessions
     where id in (select id from sessions
                   where expires_at <= now() or revoked_at is not null
                   limit ${batchSize}
                     for update skip locked)`);
  return res.rowCount ?? 0;
}
