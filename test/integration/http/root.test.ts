import { describe, expect, it } from 'vitest';
import { acceptQuality, wantsJson } from '../../../src/http/routes/root.ts';
import { useTestApp } from '../../helpers/app.ts';

/* GET / tells a person (HTML) or a program (JSON) where to go; every link it gives works. */

const t = useTestApp();
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8';
const EXPECTED = ['/docs', '/admin', '/health', '/metrics'];

describe('GET /', () => {
  it('answers a browser with a small HTML page linking docs, dashboard, health and metrics', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/', headers: { accept: BROWSER_ACCEPT } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.headers.vary).toMatch(/accept/i);
    const hrefs = [...res.body.matchAll(/href="([^"]+)"/g)].map((m) => m[1]).filter((h) => h !== 'data:,');
    expect(hrefs).toEqual(expect.arrayContaining(EXPECTED));
    // helmet's CSP forbids inline code; the page must not need any
    expect(res.headers['content-security-policy']).toContain("default-src 'self'");
    expect(res.body).not.toMatch(/<script|<style|style=/i);
    expect(res.body).toContain('npm run create-admin');
  });

  it('answers Accept: application/json with the same links as data', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/', headers: { accept: 'application/json' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const body = res.json() as { name: string; links: { rel: string; href: string }[] };
    expect(body.name).toBe('StayHub API');
    expect(body.links.map((l) => l.href)).toEqual(expect.arrayContaining(EXPECTED));
    expect(body.links.find((l) => l.rel === 'dashboard')?.href).toBe('/admin');
  });

  it('links only to pages that exist', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/', headers: { accept: 'application/json' } });
    for (const { href } of (res.json() as { links: { href: string }[] }).links) {
      const page = await t.app.inject({ method: 'GET', url: href });
      expect([200, 302], href).toContain(page.statusCode);
    }
  });

  it('no Accept header and */* get the page (curl, a link click); a JSON preference gets JSON', async () => {
    for (const accept of [undefined, '*/*', 'text/*', 'application/json;q=0.5, text/html']) {
      const res = await t.app.inject({ method: 'GET', url: '/', headers: accept ? { accept } : {} });
      expect(res.headers['content-type'], String(accept)).toMatch(/^text\/html/);
    }
    for (const accept of ['application/json, text/html;q=0.5', 'application/*', 'application/json, */*;q=0.1']) {
      const res = await t.app.inject({ method: 'GET', url: '/', headers: { accept } });
      expect(res.headers['content-type'], accept).toMatch(/^application\/json/);
    }
  });

  it('is not part of the OpenAPI document (a signpost, not an API route)', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json() as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).not.toContain('/');
    expect(Object.keys(doc.paths).length).toBeGreaterThan(5);
  });
});

describe('Accept negotiation', () => {
  it('takes the most specific range, then its q-value', () => {
    expect(acceptQuality('text/html;q=0.2, */*', 'text/html')).toBe(0.2);
    expect(acceptQuality('text/*;q=0.3, */*;q=0.9', 'text/html')).toBe(0.3);
    expect(acceptQuality('application/json', 'text/html')).toBe(0);
    expect(acceptQuality(undefined, 'text/html')).toBe(1);
    expect(wantsJson('application/json;q=0')).toBe(false);
    expect(wantsJson(BROWSER_ACCEPT)).toBe(false);
  });
});
