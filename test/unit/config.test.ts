import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
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

/** Every variable of the schema, as the .env.example test reads them from the source. */
function settingNames(): string[] {
  const source = readFileSync(new URL('../../src/config.ts', import.meta.url), 'utf8');
  return [...source.matchAll(/^\s{2}([A-Z][A-Z0-9_]+):/gm)].map((m) => m[1]!);
}

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}

/** The variables read as numbers: a word is refused as "expected number". */
function numericSettings(): string[] {
  return settingNames().filter((name) => problemsOf({ [name]: 'abc' }).some((p) => p.startsWith(`${name}:`) && /number/.test(p)));
}

/** The largest value `name` accepts, searched between 0 and 2^53. */
function largestAccepted(name: string): number {
  let lo = 0;
  let hi = Number.MAX_SAFE_INTEGER;
  if (problemsOf({ [name]: String(hi) }).length === 0) return hi;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (problemsOf({ [name]: String(mid) }).length === 0) lo = mid;
    else hi = mid;
  }
  return lo;
}

describe('empty values and ranges', () => {
  it('reads an empty value as unset: the default, never 0', () => {
    const defaults = loadConfig({});
    for (const name of ['SERVICE_FEE_PERCENT', 'OUTBOX_RETENTION_DAYS', 'EVENTS_RECONCILE_INTERVAL_SECONDS', 'PORT'] as const) {
      expect(loadConfig({ [name]: '' })[name], name).toBe(defaults[name]);
      expect(loadConfig({ [name]: '  ' })[name], name).toBe(defaults[name]);
    }
    expect(loadConfig({ SERVICE_FEE_PERCENT: '' }).SERVICE_FEE_PERCENT).toBe(12);
    expect(loadConfig({ PORT: '' }).PORT).toBe(3000);
  });

  it('reads every setting left empty as its default', () => {
    const names = settingNames();
    expect(names.length).toBeGreaterThan(50);
    const allEmpty = loadConfig(Object.fromEntries(names.map((n) => [n, ''])));
    expect(allEmpty).toEqual(loadConfig({}));
  });

  it('refuses a session lifetime beyond a year (a huge one made every sign-in a 500)', () => {
    expect(problemsOf({ SESSION_TTL_HOURS: '9007199254740991' })).toEqual([expect.stringMatching(/^SESSION_TTL_HOURS: /)]);
    expect(problemsOf({ SESSION_TTL_HOURS: '8761' })).toHaveLength(1);
    expect(loadConfig({ SESSION_TTL_HOURS: '8760' }).SESSION_TTL_HOURS).toBe(8760);
  });

  it('refuses a housekeeping interval that would overflow a timer', () => {
    // 9999999 s is beyond 2^31-1 ms: Node runs such a timer after 1 ms, over and over.
    expect(problemsOf({ HOUSEKEEPING_INTERVAL_SECONDS: '9999999' })).toEqual([expect.stringMatching(/^HOUSEKEEPING_INTERVAL_SECONDS: /)]);
    expect(problemsOf({ OUTBOX_PURGE_INTERVAL_SECONDS: '9999999' })).toEqual([expect.stringMatching(/^OUTBOX_PURGE_INTERVAL_SECONDS: /)]);
    expect(loadConfig({ HOUSEKEEPING_INTERVAL_SECONDS: '86400' }).HOUSEKEEPING_INTERVAL_SECONDS).toBe(86_400);
  });

  it('refuses OUTBOX_RETENTION_DAYS=0, saying why', () => {
    expect(problemsOf({ OUTBOX_RETENTION_DAYS: '0' })).toEqual([expect.stringMatching(/^OUTBOX_RETENTION_DAYS: must be at least 1 day/)]);
    expect(problemsOf({ WEBHOOK_RETENTION_DAYS: '0' })).toHaveLength(1);
    expect(loadConfig({ OUTBOX_RETENTION_DAYS: '1' }).OUTBOX_RETENTION_DAYS).toBe(1);
  });

  it('bounds every numeric setting', () => {
    const numeric = numericSettings();
    expect(numeric.length).toBeGreaterThan(40);
    for (const name of numeric) expect(problemsOf({ [name]: '9007199254740991' }), name).toHaveLength(1);
  });

  it('keeps every duration a timer may wait for within what a Node timer takes', () => {
    const unitMs: Record<string, number> = { MS: 1, SECONDS: 1000, HOURS: 3_600_000, DAYS: 86_400_000 };
    // Kept as dates or intervals in PostgreSQL or NATS, never waited for by a timer: longer is fine.
    const stored = new Set([
      'SESSION_TTL_HOURS',
      'IDEMPOTENCY_TTL_HOURS',
      'OUTBOX_RETENTION_DAYS',
      'WEBHOOK_RETENTION_DAYS',
      'WEBHOOK_SECRET_OVERLAP_HOURS',
      'WEBHOOK_DISABLE_AFTER_HOURS',
      'EVENTS_MAX_AGE_SECONDS',
      'EVENTS_DUPLICATE_WINDOW_SECONDS',
    ]);
    const durations = numericSettings().filter((n) => /_(MS|SECONDS|HOURS|DAYS)$/.test(n) && !stored.has(n));
    expect(durations.length).toBeGreaterThan(20);
    for (const name of durations) {
      const unit = unitMs[/_([A-Z]+)$/.exec(name)![1]!]!;
      expect(largestAccepted(name) * unit, name).toBeLessThanOrEqual(2 ** 31 - 1);
    }
    expect(problemsOf({ WEBHOOK_RETRY_SCHEDULE_SECONDS: '5,9999999' })).toEqual([
      expect.stringMatching(/^WEBHOOK_RETRY_SCHEDULE_SECONDS: /),
    ]);
  });
});
