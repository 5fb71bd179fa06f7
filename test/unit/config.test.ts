import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('loadConfig', () => {
  it('defaults to the embedded database and documented values', () => {
    const c = loadConfig({});
    expect(c.usesEmbeddedDatabase).toBe(true);
    expect(c.DATABASE_URL).toBe('postgres://postgres:stayhub@127.0.0.1:54320/stayhub');
    expect(c.SEARCH_DATABASE_URL).toBe(c.DATABASE_URL);
    expect(c.PORT).toBe(3000);
    expect(c.HOST).toBe('127.0.0.1');
    expect(c.MAX_ATTEMPTS).toBe(8);
    expect(c.BACKOFF_JITTER).toBe(true);
    expect(Object.isFrozen(c)).toBe(true);
  });

  it('uses DATABASE_URL when given', () => {
    const c = loadConfig({ DATABASE_URL: 'postgres://u:p@db.internal:5432/x' });
    expect(c.usesEmbeddedDatabase).toBe(false);
    expect(c.DATABASE_URL).toBe('postgres://u:p@db.internal:5432/x');
  });

  it('names every bad variable at once', () => {
    try {
      loadConfig({ PORT: 'eighty', MAX_ATTEMPTS: '0', BACKOFF_JITTER: 'maybe' });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const problems = (err as ConfigError).problems.join('\n');
      expect(problems).toContain('PORT');
      expect(problems).toContain('MAX_ATTEMPTS');
      expect(problems).toContain('BACKOFF_JITTER');
    }
  });

  it('lists every variable in .env.example', async () => {
    const { readFileSync } = await import('node:fs');
    const example = readFileSync(new URL('../../.env.example', import.meta.url), 'utf8');
    const source = readFileSync(new URL('../../src/config.ts', import.meta.url), 'utf8');
    const names = [...source.matchAll(/^\s{2}([A-Z][A-Z0-9_]+):/gm)].map((m) => m[1]!);
    expect(names.length).toBeGreaterThan(20);
    for (const name of names) expect(example, name).toMatch(new RegExp(`^#? ?${name}=`, 'm'));
  });

  it('docker-compose sets only variables the code reads', async () => {
    const { readFileSync } = await import('node:fs');
    const { parse } = await import('yaml');
    const compose = parse(readFileSync(new URL('../../docker-compose.yml', import.meta.url), 'utf8'), { merge: true }) as {
      services: Record<string, { build?: string; environment?: Record<string, string> }>;
    };
    const source = readFileSync(new URL('../../src/config.ts', import.meta.url), 'utf8');
    const known = new Set([...source.matchAll(/^\s{2}([A-Z][A-Z0-9_]+):/gm)].map((m) => m[1]!));
    // Our services (built from this repository); the images' own variables (POSTGRES_*, the NATS
    // passwords nats/nats.conf reads) are theirs.
    const set = Object.values(compose.services)
      .filter((s) => s.build)
      .flatMap((s) => Object.keys(s.environment ?? {}));
    expect(set.length).toBeGreaterThan(5);
    for (const name of set) expect(known, name).toContain(name);
  });
});
