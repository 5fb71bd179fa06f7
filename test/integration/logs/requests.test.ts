import { describe, expect, it } from 'vitest';
import { createUser } from '../../../src/users/auth.service.ts';
import { daysFromNow, listProperty, uniqueEmail, useTestApp } from '../../helpers/app.ts';

const t = useTestApp({ LOG_LEVEL: 'trace' });

describe('logs', () => {
  it('never contain passwords or tokens, and carry request ids', async () => {
    const password = 'Sup3r-Secret-Passw0rd';
    const email = 'logcheck@example.test';
    const reg = await t.app.inject({ method: 'POST', url: '/auth/register', payload: { email, password, name: 'Log', role: 'host' } });
    const token = reg.json().token as string;
    await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password } });
    await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: `${password}-wrong` } });
    const host = { token, auth: { authorization: `Bearer ${token}` }, user: reg.json().user };
    const p = await listProperty(t.app, host);
    // a failing request too: errors are logged in full, and must still not leak the token
    await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { authorization: `Bearer ${token}` },
      payload: { propertyId: p.id, checkIn: daysFromNow(3), checkOut: daysFromNow(4), guests: 1 },
    });
    await t.app.inject({ method: 'GET', url: '/me', headers: { authorization: `Bearer ${token}`, 'x-request-id': 'trace-me-123' } });

    const text = t.logs.text;
    expect(t.logs.lines.length).toBeGreaterThan(5);
    expect(text).not.toContain(password);
    expect(text).not.toContain(token);
    const lines = t.logs.lines.map((l) => JSON.parse(l));
    expect(lines.some((l) => l.reqId === 'trace-me-123')).toBe(true);
    // One line per request (not Fastify's two), with the request id and no query string.
    const me = lines.filter((l) => l.reqId === 'trace-me-123');
    expect(me).toEqual([expect.objectContaining({ level: 30, msg: 'GET /me 200', method: 'GET', path: '/me', statusCode: 200 })]);
  });

  it('leave the query string out of the request line', async () => {
    await t.app.inject({ method: 'GET', url: '/search?q=secret-search-term', headers: { 'x-request-id': 'query-123' } });
    const line = t.logs.lines.map((l) => JSON.parse(l)).find((l) => l.reqId === 'query-123' && l.path);
    expect(line).toMatchObject({ path: '/search' });
    expect(t.logs.text).not.toContain('secret-search-term');
  });
});

describe("the dashboard's polling", () => {
  it('logs its successful reads at debug, its failures and every other request at info', async () => {
    const email = uniqueEmail('poll-admin');
    await createUser(t.db.db, { email, password: 'operator password 1', name: 'Ops', role: 'admin' });
    const token = (await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'operator password 1' } })).json()
      .token as string;
    const get = (url: string, id: string, auth = true) =>
      t.app.inject({ method: 'GET', url, headers: { 'x-request-id': id, ...(auth ? { authorization: `Bearer ${token}` } : {}) } });
    const polled = [
      '/admin/outbox/stats',
      '/admin/outbox/depth?minutes=60',
      '/admin/outbox/messages?status=DEAD&limit=5',
      '/admin/webhooks',
    ];
    for (const [i, url] of polled.entries()) expect((await get(url, `poll-${i}`)).statusCode).toBe(200);
    expect((await get('/admin/outbox/stats', 'poll-signed-out', false)).statusCode).toBe(401);
    expect((await get('/me', 'not-polled')).statusCode).toBe(200);

    const requestLine = (id: string) => t.logs.lines.map((l) => JSON.parse(l)).find((l) => l.reqId === id && l.statusCode !== undefined);
    for (const i of polled.keys()) expect(requestLine(`poll-${i}`), polled[i]).toMatchObject({ level: 20 });
    expect(requestLine('poll-signed-out')).toMatchObject({ level: 30, statusCode: 401 });
    expect(requestLine('not-polled')).toMatchObject({ level: 30, msg: 'GET /me 200' });
  });
});

describe('error serialisation', () => {
  it('strips query parameters from database errors', async () => {
    const { createLogger } = await import('../../../src/logger.ts');
    const { LogCapture } = await import('../../helpers/app.ts');
    const capture = new LogCapture();
    const log = createLogger('info', 'test', capture);
    const err = Object.assign(new Error('Failed query: insert into users values ($1)\nparams: secret@example.test,scrypt$hash'), {
      params: ['secret@example.test', 'scrypt$hash'],
    });
    log.error({ err }, 'boom');
    expect(capture.text).toContain('Failed query');
    expect(capture.text).not.toContain('secret@example.test');
    expect(capture.text).not.toContain('scrypt$hash');
  });
});
