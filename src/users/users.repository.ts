import { and, eq, gt, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
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

/** The user behind a live (unexpired, unrevoked) session token hash. */
export async function findUserBySessionHash(db: Db, tokenHash: string): Promise<UserRow | undefined> {
  const [row] = await db
    .select({ user: users })
    .from(sessions)
    .innerJoin(users, eq(users.id, sessions.userId))
    .where(and(eq(sessions.tokenHash, tokenHash), isNull(sessions.revokedAt), gt(sessions.expiresAt, sql`now()`)));
  return row?.user;
}

export async function revokeSession(db: Db, tokenHash: string): Promise<void> {
  await db
    .update(sessions)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(sessions.tokenHash, tokenHash), isNull(sessions.revokedAt)));
}
