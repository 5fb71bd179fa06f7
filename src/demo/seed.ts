import { and, count, eq, sql } from 'drizzle-orm';
import { cancelBooking, createBooking } from '../bookings/booking.service.ts';
import type { Db } from '../db/client.ts';
import { AppError } from '../errors.ts';
import { bookings, properties, users } from '../db/schema.ts';
import { createProperty } from '../properties/properties.service.ts';
import { propertyBody } from '../properties/properties.schemas.ts';
import { createUser } from '../users/auth.service.ts';
import { verifyPassword } from '../users/password.ts';
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
 *
 * An account found at a demo address is taken as the demo's only if it is one: the demo role and
 * the demo password. Anyone can register admin@demo.stayhub.test as a guest before the seed runs;
 * adopting it would print a guest as "admin" with a password that is not its own, and give that
 * person the demo host's properties or bookings. The seed refuses instead, before writing anything.
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
  {
    ...LISBON,
    title: 'Alfama loft with river view',
    description: 'Tiled walls, a balcony over the Tagus, trams at the door.',
    nightlyPrice: 9_500,
    cleaningFee: 3_000,
    maxGuests: 2,
  },
  {
    ...LISBON,
    title: 'Bairro Alto family flat',
    description: 'Three bedrooms above the bars, quiet at the back.',
    nightlyPrice: 14_000,
    cleaningFee: 4_500,
    maxGuests: 6,
  },
  {
    ...LISBON,
    title: 'Belém garden studio',
    description: 'A small studio in a garden, ten minutes from the tower.',
    nightlyPrice: 7_000,
    cleaningFee: 2_000,
    maxGuests: 2,
  },
  {
    ...PORTO,
    title: 'Ribeira house on the Douro',
    description: 'A narrow house on the river front, four floors of stairs.',
    nightlyPrice: 12_000,
    cleaningFee: 3_500,
    maxGuests: 4,
  },
  {
    ...PORTO,
    title: 'Foz beach apartment',
    description: 'Sea view, a sandy walk to the lighthouse.',
    nightlyPrice: 11_000,
    cleaningFee: 3_000,
    maxGuests: 4,
  },
  {
    ...PORTO,
    title: 'Cedofeita artist studio',
    description: 'Bright studio among galleries and coffee shops.',
    nightlyPrice: 6_500,
    cleaningFee: 2_000,
    maxGuests: 2,
  },
  {
    ...BARCELONA,
    title: 'Gothic Quarter courtyard flat',
    description: 'Stone walls, a quiet courtyard, the cathedral round the corner.',
    nightlyPrice: 13_000,
    cleaningFee: 4_000,
    maxGuests: 3,
  },
  {
    ...BARCELONA,
    title: 'Gràcia terrace duplex',
    description: 'Two floors and a roof terrace in the village of Gràcia.',
    nightlyPrice: 16_000,
    cleaningFee: 5_000,
    maxGuests: 5,
  },
  {
    ...BARCELONA,
    title: 'Barceloneta beach room',
    description: 'A room with a sea view, the beach across the street.',
    nightlyPrice: 8_000,
    cleaningFee: 2_500,
    maxGuests: 2,
  },
  {
    ...PARIS,
    title: 'Montmartre attic under the roofs',
    description: 'Sloped ceilings, a view of Sacré-Cœur, no lift.',
    nightlyPrice: 15_000,
    cleaningFee: 4_000,
    maxGuests: 2,
  },
  {
    ...PARIS,
    title: 'Marais classic apartment',
    description: 'Parquet, moldings and a courtyard in the Marais.',
    nightlyPrice: 21_000,
    cleaningFee: 6_000,
    maxGuests: 4,
  },
  {
    ...PARIS,
    title: 'Canal Saint-Martin studio',
    description: 'A studio by the canal, bakeries below.',
    nightlyPrice: 9_000,
    cleaningFee: 2_500,
    maxGuests: 2,
  },
] as const;

/** The guest's stays: days from today, nights, guests; one of them is cancelled afterwards. */
export const DEMO_BOOKINGS = [
  { title: 'Alfama loft with river view', inDays: 14, nights: 3, guests: 2 },
  { title: 'Ribeira house on the Douro', inDays: 30, nights: 4, guests: 3 },
  { title: 'Gothic Quarter courtyard flat', inDays: 45, nights: 2, guests: 2 },
  { title: 'Marais classic apartment', inDays: 60, nights: 5, guests: 4 },
  { title: 'Foz beach apartment', inDays: 21, nights: 2, guests: 2, cancel: true },
] as const;

/** The seed will not run on this database; the message says why and what to do. `npm run seed` exits 3. */
export class SeedRefusedError extends Error {}

export class NonDemoDataError extends SeedRefusedError {
  constructor(public readonly otherUsers: number) {
    super(
      `the database holds ${otherUsers} user(s) that are not demo accounts (@${DEMO_EMAIL_DOMAIN}); ` +
        'seeding would mix demo accounts with a well-known password into real data. Use --force to seed anyway.',
    );
    this.name = 'NonDemoDataError';
  }
}

/** A demo address belongs to an account that is not the demo's (another role or password). --force does not override it. */
export class DemoAccountTakenError extends SeedRefusedError {
  constructor(public readonly accounts: { email: string; problem: string }[]) {
    super(
      `${accounts.map((a) => `${a.email} is registered already, ${a.problem}`).join('; ')}: ` +
        'someone signed up with a demo address, and the seed would print it as a demo account with a password that is not its own. ' +
        'Remove or rename that account, or seed an empty database.',
    );
    this.name = 'DemoAccountTakenError';
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

/** Why `row` is not the demo account of `role`, or undefined when it is. */
async function notTheDemoAccount(row: UserRow, role: string): Promise<string | undefined> {
  if (row.role !== role) return `as a ${row.role}, not the demo ${role}`;
  if (!(await verifyPassword(DEMO_PASSWORD, row.passwordHash))) return 'with another password than the demo one';
  return undefined;
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
  const account = await demoAccounts(db, created);
  const propertyIds = await demoProperties(db, account.host, created);
  await demoBookings(deps, account.guest, propertyIds, created);
  return { created, accounts: DEMO_USERS.map((u) => ({ role: u.role, email: u.email, password: DEMO_PASSWORD })) };
}

type Created = SeedResult['created'];

/** The demo accounts, made where missing; refused when an address is someone else's. */
async function demoAccounts(db: Db, created: Created): Promise<Record<(typeof DEMO_USERS)[number]['key'], UserRow>> {
  // Every demo address checked before anything is written: a refusal leaves the database as it was.
  const found = new Map<string, UserRow>();
  const taken: { email: string; problem: string }[] = [];
  for (const u of DEMO_USERS) {
    const row = await findUserByEmail(db, u.email);
    if (!row) continue;
    const problem = await notTheDemoAccount(row, u.role);
    if (problem) taken.push({ email: row.email, problem });
    else found.set(u.key, row);
  }
  if (taken.length > 0) throw new DemoAccountTakenError(taken);

  const account = {} as Record<(typeof DEMO_USERS)[number]['key'], UserRow>;
  for (const u of DEMO_USERS) {
    let row = found.get(u.key);
    if (!row) {
      try {
        row = await createUser(db, { email: u.email, name: u.name, role: u.role, password: DEMO_PASSWORD });
      } catch (err) {
        // Registered between the check above and now.
        if (err instanceof AppError && err.code === 'email_taken') {
          throw new DemoAccountTakenError([{ email: u.email, problem: 'just now, by someone else' }]);
        }
        throw err;
      }
      created.users++;
    }
    account[u.key] = row;
  }
  return account;
}

/** The demo host's properties, made where missing: their public ids by title. */
async function demoProperties(db: Db, host: UserRow, created: Created): Promise<Map<string, string>> {
  const propertyIds = new Map<string, string>();
  for (const p of DEMO_PROPERTIES) {
    const [existing] = await db
      .select({ publicId: properties.publicId })
      .from(properties)
      .where(and(eq(properties.hostId, host.id), eq(properties.title, p.title)));
    if (existing) {
      propertyIds.set(p.title, existing.publicId);
      continue;
    }
    // Parsed like a request body, so the demo cannot hold what the API would refuse.
    const made = await createProperty({ db }, host, propertyBody.parse(p));
    propertyIds.set(p.title, made.id);
    created.properties++;
  }
  return propertyIds;
}

/** The demo guest's bookings (and cancellations), made where missing, through the booking service. */
async function demoBookings(deps: SeedDeps, guest: UserRow, propertyIds: Map<string, string>, created: Created): Promise<void> {
  const { db } = deps;
  const today = (deps.today ?? (() => new Date().toISOString().slice(0, 10)))();
  const bookingDeps = { db, serviceFeePercent: deps.serviceFeePercent, idempotencyTtlHours: deps.idempotencyTtlHours, today: () => today };
  for (const b of DEMO_BOOKINGS) {
    const propertyPublicId = propertyIds.get(b.title)!;
    const [existing] = await db
      .select({ publicId: bookings.publicId, status: bookings.status })
      .from(bookings)
      .innerJoin(properties, eq(properties.id, bookings.propertyId))
      .where(and(eq(bookings.guestId, guest.id), eq(properties.publicId, propertyPublicId)));
    let booking = existing;
    if (!booking) {
      const checkIn = addDays(today, b.inDays);
      const res = await createBooking(bookingDeps, guest, {
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
      await cancelBooking(bookingDeps, guest, booking.publicId);
      created.cancellations++;
    }
  }
}
