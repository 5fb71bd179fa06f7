import { describe, expect, it } from 'vitest';
import { useTestApp } from '../helpers/app.ts';

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
    ]);
  });

  it('serves the UI at /docs', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs' });
    expect([200, 302]).toContain(res.statusCode);
    const page = res.statusCode === 302 ? await t.app.inject({ method: 'GET', url: res.headers.location as string }) : res;
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('swagger');
  });
});
