import { and, asc, eq, gt, lt, sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { Tx } from '../db/transaction.ts';
import { bookings, properties, users } from '../db/schema.ts';

export type PropertyRow = typeof properties.$inferSelect;
export type PropertyWithHost = PropertyRow & { hostPublicId: string };

const withHost = { property: properties, hostPublicId: users.publicId };

export async function insertProperty(tx: Tx, values: typeof properties.$inferInsert): Promise<PropertyRow> {
  const [row] = await tx.insert(properties).values(values).returning();
  return row!;
}

export async function findProperty(db: Db | Tx, publicId: string): Promise<PropertyWithHost | undefined> {
  const [row] = await db
    .select(withHost)
    .from(properties)
    .innerJoin(users, eq(users.id, properties.hostId))
    .where(eq(properties.publicId, publicId));
  return row && { ...row.property, hostPublicId: row.hostPublicId };
}

/** Locks the row for the rest of the transaction: two edits of one property apply one after the other. */
export async function findPropertyForUpdate(tx: Tx, publicId: string): Promise<PropertyRow | undefined> {
  const [row] = await tx.select().from(properties).where(eq(properties.publicId, publicId)).for('update');
  return row;
}

export async function updateProperty(tx: Tx, id: number, values: Partial<typeof properties.$inferInsert>) {
  const [row] = await tx
    .update(properties)
    .set({ ...values, updatedAt: sql`clock_timestamp()` })
    .where(eq(properties.id, id))
    .returning();
  return row!;
}

/** Confirmed stays overlapping [from, to): dates only, never who booked. */
export async function bookedRanges(db: Db, propertyId: number, from: string, to: string) {
  return db
    .select({ checkIn: bookings.checkIn, checkOut: bookings.checkOut })
    .from(bookings)
    .where(
      and(eq(bookings.propertyId, propertyId), eq(bookings.status, 'confirmed'), lt(bookings.checkIn, to), gt(bookings.checkOut, from)),
    )
    .orderBy(asc(bookings.checkIn));
}
