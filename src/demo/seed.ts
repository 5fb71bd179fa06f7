import { and, count, eq, sql } from 'drizzle-orm';
import { cancelBooking, createBooking } from '../bookings/booking.service.ts';
import type { Db } from '../db/client.ts';
import { bookings, properties, users } from '../db/schema.ts';
import { createProperty } from '../properties/properties.service.ts';
import { propertyBody } from '../properties/properties.schemas.ts';
import { createUser } from '../users/auth.service.ts';
import { findUserByEmail, type UserRow } from '../users/users.repository.ts';

/*
 * Demo data for a first look (`npm run seed`): a host, a guest and an admin, a dozen properties in
 * four cities, some bookings and one cancellation. Everything goes through the same service
 * functions the API calls, so each write also writes its outbox row: the worker sends the emails
 * and indexes the properties for /search, and the dashboard has messages to count.
 *
 * Idempotent: each item is looked up by its natural key (email; host + title; guest + property)
 * and created only if missing, so a second run adds nothing and a run cut short is completed by
 * the next one. Dates are relative to today, so bookings are always in the future.
 */

/** Every demo account's email ends with this; any other user means the database holds real data. */
export const DEMO_EMAIL_DOMAIN = 'demo.stayhub.test';

/** Well known on purpose: this is demo data. The refusal below keeps it out of real databases. */
export const DEMO_PASSWORD = 'stayhub-demo-password';

export const DEMO_USERS = [
  { key: 'host', email: `host@${DEMO_EMAIL_DOMAIN}`, name: 'Hana Host', role: 'host' },
  { key: 'guest', email: `guest@${DEMO_EMAIL_DOMAIN}`, name: 'Gil Guest', role: 'guest' },
  { key: 'admin', email: `admin@${DEMO_EMAIL_DOMAIN}`, name: 'Ada Admin', role: 'admin' },
] as const;

type City = { city: string; country: string; currency: string };
const LISBON: City = { city: 'Lisbon', country: 'PT', currency: 'EUR' };
const PORTO: City = { city: 'Porto', country: 'PT', currency: 'EUR' };
const BARCELONA: City = { city: 'Barcelona', country: 'ES', currency: 'EUR' };
const PARIS: City = { city: 'Paris', country: 'FR', currency: 'EUR' };

/** Prices in minor units (cents). */
export const DEMO_PROPERTIES = [
  { ...LISBON, title: 'Alfama loft with river view', description: 'Tiled walls, a balcony over the Tagus, trams at the door.', nightlyPrice: 9_500, cleaningFee: 3_000, maxGuests: 2 },
  { ...LISBON, title: 'Bairro Alto family flat', description: 'Three bedrooms above the bars, quiet at the back.', nightlyPrice: 14_000, cleaningFee: 4_500, maxGuests: 6 },
  { ...LISBON, title: 'Belém garden studio', description: 'A small studio in a garden, ten minutes from the tower.', nightlyPrice: 7_000, cleaningFee: 2_000, maxGuests: 2 },
  { ...PORTO, title: 'Ribeira house on the Douro', description: 'A narrow house on the river front, four floors of stairs.', nightlyPrice: 12_000, cleaningFee: 3_500, maxGuests: 4 },
  { ...PORTO, title: 'Foz beach apartment', description: 'Sea view, a sandy walk to the lighthouse.', nightlyPrice: 11_000, cleaningFee: 3_000, maxGuests: 4 },
  { ...PORTO, title: 'Cedofeita artist studio', description: 'Bright studio among galleries and coffee shops.', nightlyPrice: 6_500, cleaningFee: 2_000, maxGuests: 2 },
  { ...BARCELONA, title: 'Gothic Quarter courtyard flat', description: 'Stone walls, a quiet courtyard, the cathedral round the corner.', nightlyPrice: 13_000, cleaningFee: 4_000, maxGuests: 3 },
  { ...BARCELONA, title: 'Gràcia terrace duplex', description: 'Two floors and a roof terrace in the village of Gràcia.', nightlyPrice: 16_000, cleaningFee: 5_000, maxGuests: 5 },
  { ...BARCELONA, title: 'Barceloneta beach room', description: 'A room with a sea view, the beach across the street.', nightlyPrice: 8_000, cleaningFee: 2_500, maxGuests: 2 },
  { ...PARIS, title: 'Montmartre attic under the roofs', description: 'Sloped ceilings, a view of Sacré-Cœur, no lift.', nightlyPrice: 15_000, cleaningFee: 4_000, maxGuests: 2 },
  { ...PARIS, title: 'Marais classic apartment', description: 'Parquet, moldings and a courtyard in the Marais.', nightlyPrice: 21_000, cleaningFee: 6_000, maxGuests: 4 },
  { ...PARIS, title: 'Canal Saint-Martin studio', description: 'A studio by the canal, bakeries below.', nightlyPrice: 9_000, cleaningFee: 2_500, maxGuests: 2 },
] as const;

/** The guest's stays: days from today, nights, guests; one of them is cancelled afterwards. */
export const DEMO_BOOKINGS = [
  { title: 'Alfama loft with river view', inDays: 14, nights: 3, guests: 2 },
  { title: 'Ribeira house on the Douro', inDays: 30, nights: 4, guests: 3 },
  { title: 'Gothic Quarter courtyard flat', inDays: 45, nights: 2, guests: 2 },
  { title: 'Marais classic apartment', inDays: 60, nights: 5, guests: 4 },
  { title: 'Foz beach apartment', inDays: 21, nights: 2, guests: 2, cancel: true },
] as const;

export class NonDemoDataError extends Error {
  constructor(public readonly otherUsers: number) {
    super(
      `the database holds ${otherUsers} user(s) that are not demo accounts (@${DEMO_EMAIL_DOMAIN}); ` +
        'seeding would mix demo accounts with a well-known password into real data. Use --force to seed anyway.',
    );
    this.name = 'NonDemoDataError';
  }
}

export interface SeedDeps {
  db: Db;
  serviceFeePercent: number;
  idempotencyTtlHours: number;
  today?: () => string;
}

export interface SeedResult {
  created: { users: number; properties: number; bookings: number; cancellations: number };
  accounts: { role: string; email: string; password: string }[];
}

const addDays = (isoDate: string, days: number) => {
  const d = new Date(`${isoDate}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + days);
  return d.toISOString().slice(0, 10);
};

async function countNonDemoUsers(db: Db): Promise<number> {
  const [row] = await db
    .select({ n: count() })
    .from(users)
    .where(sql`lower(${users.email}) not like ${`%@${DEMO_EMAIL_DOMAIN}`}`);
  return row?.n ?? 0;
}

export async function seedDemo(deps: SeedDeps, opts: { force?: boolean } = {}): Promise<SeedResult> {
  const { db } = deps;
  if (!opts.force) {
    const others = await countNonDemoUsers(db);
    if (others > 0) throw new NonDemoDataError(others);
  }
  const created = { users: 0, properties: 0, bookings: 0, cancellations: 0 };

  const account = {} as Record<(typeof DEMO_USERS)[number]['key'], UserRow>;
  for (const u of DEMO_USERS) {
    let row = await findUserByEmail(db, u.email);
    if (!row) {
      row = await createUser(db, { email: u.email, name: u.name, role: u.role, password: DEMO_PASSWORD });
      created.users++;
    }
    account[u.key] = row;
  }

  const propertyIds = new Map<string, string>();
  for (const p of DEMO_PROPERTIES) {
    const [existing] = await db
      .select({ publicId: properties.publicId })
      .from(properties)
      .where(and(eq(properties.hostId, account.host.id), eq(properties.title, p.title)));
    if (existing) {
      propertyIds.set(p.title, existing.publicId);
      continue;
    }
    // Parsed like a request body, so the demo cannot hold what the API would refuse.
    const made = await createProperty({ db }, account.host, propertyBody.parse(p));
    propertyIds.set(p.title, made.id);
    created.properties++;
  }

  const today = (deps.today ?? (() => new Date().toISOString().slice(0, 10)))();
  const bookingDeps = { db, serviceFeePercent: deps.serviceFeePercent, idempotencyTtlHours: deps.idempotencyTtlHours, today: () => today };
  for (const b of DEMO_BOOKINGS) {
    const propertyPublicId = propertyIds.get(b.title)!;
    const [existing] = await db
      .select({ publicId: bookings.publicId, status: bookings.status })
      .from(bookings)
      .innerJoin(properties, eq(properties.id, bookings.propertyId))
      .where(and(eq(bookings.guestId, account.guest.id), eq(properties.publicId, propertyPublicId)));
    let booking = existing;
    if (!booking) {
      const checkIn = addDays(today, b.inDays);
      const res = await createBooking(bookingDeps, account.guest, {
        propertyId: propertyPublicId,
        checkIn,
        checkOut: addDays(checkIn, b.nights),
        guests: b.guests,
      });
      // Someone trying the demo booked these dates first: that booking is demo enough.
      if ('refused' in res) continue;
      booking = { publicId: res.body.id, status: res.body.status };
      created.bookings++;
    }
    if ('cancel' in b && b.cancel && booking.status === 'confirmed') {
      await cancelBooking(bookingDeps, account.guest, booking.publicId);
      created.cancellations++;
    }
  }

  return { created, accounts: DEMO_USERS.map((u) => ({ role: u.role, email: u.email, password: DEMO_PASSWORD })) };
}
