import { describe, expect, it } from 'vitest';
import { daysFromNow, listProperty, useTestApp } from '../helpers/app.ts';

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

describe('error serialisation', () => {
  it('strips query parameters from database errors', async () => {
    const { createLogger } = await import('../../src/logger.ts');
    const { LogCapture } = await import('../helpers/app.ts');
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
