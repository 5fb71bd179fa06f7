import { customType, timestamp } from 'drizzle-orm/pg-core';

/** Column types the tables share: PostgreSQL types drizzle has no builder for, and timestamptz as Date. */
export const daterange = customType<{ data: string; driverData: string }>({ dataType: () => 'daterange' });
export const tsvector = customType<{ data: string; driverData: string }>({ dataType: () => 'tsvector' });
export const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });
