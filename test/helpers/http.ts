/*
 * Requests to an API that a test started as a process of its own (`npm start`, src/commands/start.ts),
 * over its real port, as a person's curl sends them. A test of the built app calls `app.inject`
 * instead (helpers/app.ts).
 */

export interface Answer {
  status: number;
  body: Record<string, any>;
}

export interface HttpApi {
  get(url: string, token?: string): Promise<Answer>;
  post(url: string, body: object, token?: string): Promise<Answer>;
}

/** The API at `base` ('http://127.0.0.1:PORT'); `token` is sent as a bearer token. */
export function httpApi(base: string): HttpApi {
  const send = async (method: string, url: string, body?: object, token?: string): Promise<Answer> => {
    const res = await fetch(`${base}${url}`, {
      method,
      headers: {
        ...(body ? { 'content-type': 'application/json' } : {}),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };
  return {
    get: (url, token) => send('GET', url, undefined, token),
    post: (url, body, token) => send('POST', url, body, token),
  };
}

/**
 * What a first session does: a host and a guest sign up, the host lists a flat, the guest books
 * two nights of it five days from now. Each answer is returned as it came, for the test to judge.
 */
export async function bookAStay(api: HttpApi): Promise<Record<'host' | 'guest' | 'property' | 'booking', Answer>> {
  const password = 'correct horse battery';
  const host = await api.post('/auth/register', { email: 'h@example.test', password, name: 'H', role: 'host' });
  const guest = await api.post('/auth/register', { email: 'g@example.test', password, name: 'G', role: 'guest' });
  const property = await api.post(
    '/properties',
    { title: 'Flat', city: 'Porto', country: 'PT', nightlyPrice: 100, maxGuests: 2 },
    host.body.token,
  );
  const day = (n: number) => new Date(Date.now() + n * 86_400_000).toISOString().slice(0, 10);
  const booking = await api.post(
    '/bookings',
    { propertyId: property.body.id, checkIn: day(5), checkOut: day(7), guests: 1 },
    guest.body.token,
  );
  return { host, guest, property, booking };
}

/**
 * Polls `probe` every 200 ms until it returns something other than undefined, or fails after
 * `timeoutMs` naming `what`. A probe that throws counts as "not yet": the API is still starting.
 */
export async function pollApi<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
