import { randomUUID } from 'node:crypto';
import { ApiClient, GaveUp, type ApiResponse } from './client.ts';
import type { ClientRecord } from './evidence.ts';
import type { Rng } from './rng.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * The load: hosts list properties and edit them, guests book (often the same property for the
 * same dates at the same moment) and cancel, hosts cancel too, a few new users sign up. Bounded
 * loops on loopback only, for a fixed time. Everything the clients were told is kept, so the
 * checks can hold the system to it: every 201 must be findable afterwards, every cancellation
 * that answered 200 must be cancelled.
 */

export interface User {
  email: string;
  token: string;
  role: 'guest' | 'host';
  /** Its emails are answered 550 by the SMTP sink: its messages must end DEAD. */
  bounces: boolean;
}

export interface Property {
  id: string;
  host: User;
  maxGuests: number;
}

/**
 * What the client was told of one booking (evidence.ts ClientRecord: the addresses it booked
 * with, the status it was last told, when), and whose it is.
 */
export type ClientBooking = ClientRecord & { guest: User; property: Property; answeredAt: number };

export interface LoadOptions {
  api: ApiClient;
  rng: Rng;
  hosts: number;
  guests: number;
  /** Guests whose address the SMTP sink refuses with 550. */
  bounceEmails: string[];
  concurrency: number;
  /** Pause between a loop's actions, ms. */
  thinkMs: [number, number];
  /** Unique per run, so a re-run against the same database never collides. */
  runTag: string;
}

const PASSWORD = 'chaos-monkey-password';

export function isoDay(daysFromToday: number): string {
  const d = new Date();
  d.setUTCHours(0, 0, 0, 0);
  d.setUTCDate(d.getUTCDate() + daysFromToday);
  return d.toISOString().slice(0, 10);
}

export class Load {
  readonly users: User[] = [];
  readonly properties: Property[] = [];
  readonly bookings = new Map<string, ClientBooking>();
  readonly figures = {
    bookingAttempts: 0,
    bookingsCreated: 0,
    replays: 0,
    conflicts409: 0,
    rejected422: 0,
    overlapStorms: 0,
    cancellations: 0,
    propertyEdits: 0,
    propertiesCreated: 0,
    usersRegistered: 0,
    reads: 0,
    gaveUp: 0,
    /** Bookings sent twice at once with the same Idempotency-Key (a double-click, a resend). */
    doubleSubmits: 0,
    /** Double submits whose two answers disagree (different booking, or one 201 and one refusal). */
    idempotencyMismatches: [] as string[],
    otherUnexpected: [] as { route: string; status: number; body: string }[],
  };
  private startedAt = 0;
  private userSeq = 0;

  constructor(private readonly o: LoadOptions) {}

  private unexpected(route: string, status: number, body: unknown) {
    if (this.figures.otherUnexpected.length < 50) {
      this.figures.otherUnexpected.push({ route, status, body: JSON.stringify(body).slice(0, 300) });
    }
  }

  guests() {
    return this.users.filter((u) => u.role === 'guest');
  }

  hosts() {
    return this.users.filter((u) => u.role === 'host');
  }

  /** Registers a user; after a lost response the retry may meet email_taken, then it logs in. */
  async register(role: 'guest' | 'host', email?: string): Promise<User> {
    const address = email ?? `${role}-${this.o.runTag}-${++this.userSeq}@chaos.test`;
    const body = { email: address, password: PASSWORD, name: `Chaos ${role} ${this.userSeq}`, role };
    let res = await this.o.api.call('POST', '/auth/register', { body, route: 'POST /auth/register' });
    if (res.status === 409 && res.body?.code === 'email_taken') {
      res = await this.o.api.call('POST', '/auth/login', { body: { email: address, password: PASSWORD }, route: 'POST /auth/login' });
    }
    if (res.status !== 201 && res.status !== 200) throw new Error(`register ${role}: ${res.status} ${JSON.stringify(res.body)}`);
    const user: User = { email: address, token: res.body.token, role, bounces: this.o.bounceEmails.includes(address) };
    this.users.push(user);
    this.figures.usersRegistered++;
    return user;
  }

  async createProperty(host: User): Promise<Property | undefined> {
    const rng = this.o.rng;
    const maxGuests = rng.int(2, 6);
    const res = await this.o.api.call('POST', '/properties', {
      token: host.token,
      route: 'POST /properties',
      body: {
        title: `Chaos flat ${rng.int(1, 99_999)}`,
        description: 'Listed by the chaos run.',
        city: rng.pick(['Porto', 'Lisbon', 'Lyon', 'Ghent', 'Turin']),
        country: rng.pick(['PT', 'FR', 'BE', 'IT']),
        nightlyPrice: rng.int(5_000, 30_000),
        cleaningFee: rng.int(0, 5_000),
        maxGuests,
      },
    });
    if (res.status !== 201) {
      this.unexpected('POST /properties', res.status, res.body);
      return undefined;
    }
    const p: Property = { id: res.body.id, host, maxGuests };
    this.properties.push(p);
    this.figures.propertiesCreated++;
    return p;
  }

  /**
   * Users and properties the load starts with, created concurrently (sign-up hashes a password:
   * one after the other, 22 of them took ~14 s on a loaded machine). Each call draws from the rng
   * before its first await, so the draws stay in a fixed order.
   */
  async setup(): Promise<void> {
    await Promise.all([
      ...Array.from({ length: this.o.hosts }, () => this.register('host')),
      ...this.o.bounceEmails.map((email) => this.register('guest', email)),
      ...Array.from({ length: this.o.guests - this.o.bounceEmails.length }, () => this.register('guest')),
    ]);
    await Promise.all(this.hosts().flatMap((host) => [this.createProperty(host), this.createProperty(host)]));
    // Each 550 guest books once before the load, so every run, however short, exercises the dead
    // letter path (the random load alone left a 20 s run without one).
    const bouncers = this.guests().filter((g) => g.bounces);
    await Promise.all(
      bouncers.map((g, i) =>
        this.book(g, this.properties[i % this.properties.length]!, { checkIn: isoDay(400 + 5 * i), checkOut: isoDay(402 + 5 * i) }),
      ),
    );
  }

  /** The booking horizon grows with time, so the calendar never fills up for good. */
  private dates(): { checkIn: string; checkOut: string } {
    const elapsed = (Date.now() - this.startedAt) / 1000;
    const horizon = Math.min(300, 20 + Math.floor(elapsed / 3));
    const start = this.o.rng.int(1, horizon);
    return { checkIn: isoDay(start), checkOut: isoDay(start + this.o.rng.int(1, 4)) };
  }

  async book(guest: User, property: Property, dates: { checkIn: string; checkOut: string }): Promise<void> {
    this.figures.bookingAttempts++;
    const key = randomUUID();
    const body = { propertyId: property.id, ...dates, guests: this.o.rng.int(1, 2) };
    const send = () => this.o.api.call('POST', '/bookings', { token: guest.token, idempotencyKey: key, route: 'POST /bookings', body });
    // One booking in ten is sent twice at the same moment with the same key: both answers must
    // name the same booking (the second one replayed), or both be the same refusal.
    const double = this.o.rng.chance(0.1);
    const answers = double ? await Promise.all([send(), send()]) : [await send()];
    if (double) {
      this.figures.doubleSubmits++;
      const [a, b] = answers as [ApiResponse, ApiResponse];
      const ok201 = (r: ApiResponse) => r.status === 201 || r.status === 200;
      const same = ok201(a) && ok201(b) ? a.body.id === b.body.id : !ok201(a) && !ok201(b) && a.status === b.status;
      if (!same && this.figures.idempotencyMismatches.length < 20) {
        this.figures.idempotencyMismatches.push(
          `key ${key}: ${a.status} ${a.body?.id ?? a.body?.code} vs ${b.status} ${b.body?.id ?? b.body?.code}`,
        );
      }
    }
    for (const res of answers) {
      if (res.status === 201 || res.status === 200) {
        if (res.headers.get('idempotent-replayed') === 'true') this.figures.replays++;
        const id = res.body.id as string;
        if (!this.bookings.has(id)) {
          this.figures.bookingsCreated++;
          const [guestEmail, hostEmail] = [guest.email, property.host.email];
          this.bookings.set(id, { id, guest, guestEmail, property, hostEmail, ...dates, status: 'confirmed', answeredAt: Date.now() });
        }
      } else if (res.status === 409 && res.body?.code === 'dates_unavailable') {
        this.figures.conflicts409++;
      } else if (res.status === 422) {
        this.figures.rejected422++;
      } else {
        this.unexpected('POST /bookings', res.status, res.body);
      }
    }
  }

  /** Several guests ask for the same property and dates at the same moment: at most one may win. */
  async overlapStorm(): Promise<void> {
    this.figures.overlapStorms++;
    const property = this.o.rng.pick(this.properties);
    const dates = this.dates();
    const n = this.o.rng.int(2, 4);
    const guests = Array.from({ length: n }, () => this.o.rng.pick(this.guests()));
    await Promise.all(guests.map((g) => this.book(g, property, dates)));
  }

  async cancel(): Promise<void> {
    const live = [...this.bookings.values()].filter((b) => b.status === 'confirmed' && !b.cancelUncertain);
    if (live.length === 0) return;
    const b = this.o.rng.pick(live);
    const by = this.o.rng.chance(0.7) ? b.guest : b.property.host;
    b.cancelUncertain = true;
    const res = await this.o.api.call('POST', `/bookings/${b.id}/cancel`, { token: by.token, route: 'POST /bookings/:id/cancel' });
    if (res.status === 200 && res.body?.status === 'cancelled') {
      b.status = 'cancelled';
      b.cancelUncertain = false;
      b.cancelledAt = Date.now();
      this.figures.cancellations++;
    } else {
      this.unexpected('POST /bookings/:id/cancel', res.status, res.body);
    }
  }

  async editProperty(): Promise<void> {
    const p = this.o.rng.pick(this.properties);
    const res = await this.o.api.call('PATCH', `/properties/${p.id}`, {
      token: p.host.token,
      route: 'PATCH /properties/:id',
      body: { title: `Chaos flat, edited ${this.o.rng.int(1, 99_999)}`, nightlyPrice: this.o.rng.int(5_000, 30_000) },
    });
    if (res.status === 200) this.figures.propertyEdits++;
    else this.unexpected('PATCH /properties/:id', res.status, res.body);
  }

  async read(): Promise<void> {
    this.figures.reads++;
    const g = this.o.rng.pick(this.guests());
    if (this.o.rng.chance(0.5)) {
      const res = await this.o.api.call('GET', '/bookings?limit=20', { token: g.token, route: 'GET /bookings' });
      if (res.status !== 200) this.unexpected('GET /bookings', res.status, res.body);
    } else {
      const p = this.o.rng.pick(this.properties);
      const res = await this.o.api.call('GET', `/properties/${p.id}/availability?from=${isoDay(0)}&to=${isoDay(60)}`, {
        route: 'GET /properties/:id/availability',
      });
      if (res.status !== 200) this.unexpected('GET /properties/:id/availability', res.status, res.body);
    }
  }

  private async step(): Promise<void> {
    const r = this.o.rng.next();
    if (r < 0.45) return this.book(this.o.rng.pick(this.guests()), this.o.rng.pick(this.properties), this.dates());
    if (r < 0.55) return this.overlapStorm();
    if (r < 0.72) return this.cancel();
    if (r < 0.82) return this.editProperty();
    if (r < 0.85) return void (await this.createProperty(this.o.rng.pick(this.hosts())));
    if (r < 0.87) return void (await this.register(this.o.rng.chance(0.8) ? 'guest' : 'host'));
    return this.read();
  }

  /** Runs `concurrency` loops until `durationMs` has passed. */
  async run(durationMs: number): Promise<void> {
    this.startedAt = Date.now();
    const until = this.startedAt + durationMs;
    const loop = async () => {
      while (Date.now() < until) {
        try {
          await this.step();
        } catch (err) {
          if (err instanceof GaveUp) this.figures.gaveUp++;
          else throw err;
        }
        const [lo, hi] = this.o.thinkMs;
        await sleep(this.o.rng.between(lo, hi));
      }
    };
    await Promise.all(Array.from({ length: this.o.concurrency }, loop));
  }
}
