import { sql } from 'drizzle-orm';
import { bigint, bigserial, boolean, char, check, index, integer, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import { ts } from './columns.ts';
import { users } from './users.ts';

export const properties = pgTable(
  'properties',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id),
    title: text('title').notNull(),
    description: text('description').notNull().default(''),
    city: text('city').notNull(),
    /** ISO 3166-1 alpha-2, upper case. */
    country: char('country', { length: 2 }).notNull(),
    /** ISO 4217, upper case. */
    currency: char('currency', { length: 3 }).notNull().default('EUR'),
    nightlyPrice: integer('nightly_price').notNull(),
    cleaningFee: integer('cleaning_fee').notNull().default(0),
    maxGuests: integer('max_guests').notNull(),
    active: boolean('active').notNull().default(true),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    index('properties_host_idx').on(t.hostId),
    check('properties_prices_check', sql`${t.nightlyPrice} > 0 and ${t.cleaningFee} >= 0`),
    check('properties_max_guests_check', sql`${t.maxGuests} between 1 and 100`),
  ],
);
