import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../helpers/app.ts';

const t = useTestApp();

describe('OpenAPI', () => {
  it('is generated from the zod schemas that validate requests', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs/json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toMatch(/^3\./);
    const post = doc.paths['/bookings'].post;
    const schema = post.requestBody.content['application/json'].schema;
    expect(schema.required).toEqual(expect.arrayContaining(['propertyId', 'checkIn', 'checkOut', 'guests']));
    expect(schema.additionalProperties).toBe(false);
    expect(Object.keys(post.responses)).toEqual(expect.arrayContaining(['201']));
    expect(doc.paths['/properties/{id}/availability'].get.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(['id', 'from', 'to']),
    );
  });

  it("documents each attempt's signed and answered headers in one delivery's detail, not in the list", async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const schemaOf = (path: string) => doc.paths[path].get.responses['200'].content['application/json'].schema;
    const attempt = schemaOf('/webhooks/deliveries/{id}').properties.attempts.items;
    expect(Object.keys(attempt.properties)).toEqual(
      expect.arrayContaining(['requestHeaders', 'responseHeaders', 'responseHeadersOmitted']),
    );
    expect(attempt.properties.responseHeaders).toMatchObject({ type: 'array', nullable: true, items: { required: ['name', 'value'] } });
    const listed = schemaOf('/webhooks/endpoints/{id}/deliveries').properties.items.items.properties.attempts.items;
    expect(Object.keys(listed.properties)).not.toContain('responseHeaders');
  });

  it("documents the admin view of the events stream's consumer groups", async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const op = doc.paths['/admin/events/groups'].get;
    expect(op.tags).toEqual(['admin']);
    expect(op.security).toEqual([{ bearer: [] }]);
    const schema = op.responses['200'].content['application/json'].schema;
    expect(Object.keys(schema.properties)).toEqual(['configured', 'stream', 'groups', 'generatedAt']);
    expect(Object.keys(schema.properties.groups.items.properties)).toEqual([
      'name',
      'pending',
      'ackPending',
      'oldestUnackedAgeSeconds',
      'openDeadLetters',
      'eventsAgedOut',
    ]);
    expect(Object.keys(schema.properties.stream.properties)).toEqual(['name', 'exists', 'messages', 'firstSeq', 'firstAt']);
  });

  it('declares the bearer token on exactly the operations that answer 401 without one, and documents that 401', async () => {
    // Which routes require a user is asked of the app itself: every documented operation is called
    // without a token. A new authenticated route that forgets its `security` fails here (and /docs
    // would not send the token given under "Authorize").
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const needsToken: string[] = [];
    const declares: string[] = [];
    const documents401: string[] = [];
    for (const [route, ops] of Object.entries<Record<string, { security?: unknown; responses: Record<string, unknown> }>>(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const name = `${method.toUpperCase()} ${route}`;
        const url = route.replace(/\{[^}]+\}/g, randomUUID());
        const withBody = method === 'post' || method === 'patch' || method === 'put';
        const res = await t.app.inject({ method: method.toUpperCase() as 'GET', url, ...(withBody ? { payload: {} } : {}) });
        if (res.statusCode === 401) needsToken.push(name);
        if (JSON.stringify(op.security) === JSON.stringify([{ bearer: [] }])) declares.push(name);
        if (op.responses['401']) documents401.push(name);
      }
    }
    expect(needsToken).toContain('GET /me'); // the probe itself works
    expect(declares.sort()).toEqual(needsToken.sort());
    // POST /auth/login answers 401 too, for a wrong password: documented, with no token to send.
    expect(documents401.sort()).toEqual([...needsToken, 'POST /auth/login'].sort());
    expect(doc.components.securitySchemes.bearer).toEqual({ type: 'http', scheme: 'bearer' });
  });

  it('describes every response in words, successes too (no "Default Response")', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const undescribed: string[] = [];
    for (const [route, ops] of Object.entries<Record<string, { responses: Record<string, { description?: string }> }>>(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        for (const [status, response] of Object.entries(op.responses)) {
          if (!response.description || response.description === 'Default Response')
            undescribed.push(`${method.toUpperCase()} ${route} ${status}`);
        }
      }
    }
    expect(undescribed).toEqual([]);
    expect(doc.paths['/bookings'].post.responses['201'].description).toMatch(/^The booking, confirmed/);
  });

  it('gives every operation a summary, and its client errors as problem documents with their codes', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    for (const [route, ops] of Object.entries<Record<string, { summary?: string; responses: Record<string, any> }>>(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        expect(op.summary, `${method.toUpperCase()} ${route}`).toMatch(/\S/);
        for (const [status, response] of Object.entries(op.responses).filter(([s]) => /^4/.test(s))) {
          const schema = response.content?.['application/problem+json']?.schema;
          expect(schema, `${method.toUpperCase()} ${route} ${status}`).toBeDefined();
          expect(schema.properties.status.enum).toEqual([Number(status)]);
          expect(schema.properties.code.enum.length).toBeGreaterThan(0);
        }
      }
    }
  });

  it('documents POST /bookings: the Idempotency-Key header and every refusal by its code', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const post = doc.paths['/bookings'].post;
    const key = post.parameters.find((p: { in: string; name: string }) => p.in === 'header' && p.name === 'idempotency-key');
    expect(key).toMatchObject({ required: false, schema: { type: 'string', maxLength: 255 } });
    expect(key.description).toContain('safe to retry');
    const codes = (status: number) => post.responses[status].content['application/problem+json'].schema.properties.code.enum;
    expect(codes(400)).toEqual(expect.arrayContaining(['validation_failed', 'bad_request']));
    expect(codes(401)).toEqual(['unauthorized']);
    expect(codes(403)).toEqual(['forbidden']);
    expect(codes(404)).toEqual(['not_found']);
    expect(codes(409)).toEqual(['dates_unavailable', 'request_in_progress']);
    expect(codes(422)).toEqual(
      expect.arrayContaining(['check_in_in_past', 'too_many_guests', 'stay_too_long', 'property_inactive', 'idempotency_key_reused']),
    );
  });

  it('serves the UI at /docs', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs' });
    expect([200, 302]).toContain(res.statusCode);
    const page = res.statusCode === 302 ? await t.app.inject({ method: 'GET', url: res.headers.location as string }) : res;
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('swagger');
  });
});
