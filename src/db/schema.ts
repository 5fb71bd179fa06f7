/*
 * The tables. Internal ids are bigserial and never leave the database; what clients see is the
 * `public_id` UUID. Money is integer minor units; a stay is a half-open date range [check_in, check_out).
 * What drizzle-kit cannot express (the btree_gist extension, the EXCLUDE constraint) lives in the
 * hand-written migration `migrations/0001_booking_exclusion.sql`.
 *
 * Declared one group of tables a module in src/db/schema/ (drizzle-kit reads that folder); this
 * module is the one place the rest of the code imports them from.
 */

export * from './schema/users.ts';
export * from './schema/properties.ts';
export * from './schema/bookings.ts';
export * from './schema/search.ts';
export * from './schema/events.ts';
export * from './schema/webhooks.ts';
export * from './schema/portal-links.ts';
