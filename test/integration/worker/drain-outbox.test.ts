import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { useTestDatabase } from '../../helpers/db.ts';
import { lineMatching } from '../../helpers/npm-run.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { getMessages, insertMessages } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The worker as a real process (`node --import tsx …`), because these behaviours are about
 * processes: flags and exit codes, signals, and a worker killed mid-handler.
 * test/helpers/worker-entry.ts is the real main() plus a slow and a no-op test handler.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const REAL = 'src/commands/drain-outbox.ts';
const TEST_ENTRY = 'test/helpers/worker-entry.ts';

const tdb = useTestDatabase('wproc', { truncate: 'outbox' });

interface Proc {
  child: ChildProcess;
  lines: string[];
  stderr: string[];
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
}

const running: ChildProcess[] = [];
afterEach(() => {
  for (const c of running.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function startWorker(entry: string, args: string[], env: Record<string, string> = {}): Proc {
  const { DATABASE_URL: _a, SMTP_URL: _b, ...inherited } = process.env;
  const child = spawn(process.execPath, entryArgs(entry, ...args), {
    cwd: ROOT,
    env: {
      ...inherited,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'info',
      POLL_INTERVAL_MS: '100',
      BACKOFF_JITTER: 'false',
      MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.push(child);
  const lines: string[] = [];
  const stderr: string[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (l) => lines.push(l));
  readline.createInterface({ input: child.stderr! }).on('line', (l) => stderr.push(l));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    lines,
    stderr,
    exit,
    // A hang guard, wide enough for a node + tsx start on a loaded two-core machine (15 s was not).
    waitForLine: (pattern, timeoutMs = 45_000) =>
      lineMatching(lines, pattern, timeoutMs, {
        ended: () => child.exitCode !== null,
        output: () => `stdout:\n${lines.join('\n')}\nstderr:\n${stderr.join('\n')}`,
      }),
  };
}

const logEntries = (p: Proc) =>
  p.lines.flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>];
    } catch {
      return [];
    }
  });

describe('drain-outbox flags and exit codes', () => {
  it('--list-topics prints each registered topic with its handlers, one a line, and exits 0', async () => {
    const p = startWorker(REAL, ['--list-topics']);
    expect((await p.exit).code).toBe(0);
    expect(p.lines).toContain('booking.created: email.guest-confirmation, email.host-new-booking, webhooks.booking-created');
    expect(p.lines).toContain('booking.cancelled: email.guest-cancellation, email.host-cancellation, webhooks.booking-cancelled');
    for (const l of p.lines) expect(l).toMatch(/^[a-z.-]+: [a-z.-]+(, [a-z.-]+)*$/);
  });

  it('exits 2 with a clear message on a bad flag, and 1 when the database is unreachable', async () => {
    // Three processes side by side: most of each one's time is node and tsx starting.
    const bad = startWorker(REAL, ['--batch-size', 'lots']);
    const unknown = startWorker(REAL, ['--fast']);
    const down = startWorker(REAL, ['--once'], { DATABASE_URL: 'postgres://postgres:secret@127.0.0.1:1/nowhere' });

    expect((await bad.exit).code).toBe(2);
    expect(bad.stderr.join('\n')).toContain('--batch-size must be a whole number from 1 to 1000 (got "lots")');

    expect((await unknown.exit).code).toBe(2);
    expect(unknown.stderr.join('\n')).toMatch(/unknown flag --fast[\s\S]*usage: npm run drain-outbox/);

    expect((await down.exit).code).toBe(1);
    const msg = down.stderr.join('\n');
    expect(msg).toContain('cannot reach the database at 127.0.0.1:1/nowhere');
    expect(msg).not.toContain('secret');
  });

  it('--once processes one batch (here: 2 of 3 booking messages, 4 emails in MAIL_DIR, a line per handler outcome at debug) and exits 0', async () => {
    const payloads = [bookingPayload(), bookingPayload(), bookingPayload()];
    const rows = await insertMessages(
      tdb.db,
      payloads.map((p) => ({ topic: 'booking.created', payload: p, key: p.bookingId })),
    );
    const mailDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-'));
    const p = startWorker(REAL, ['--once', '--batch-size', '2'], { MAIL_DIR: mailDir, LOG_LEVEL: 'debug' });
    expect((await p.exit).code).toBe(0);
    const after = await getMessages(
      tdb.db,
      rows.map((r) => r.id),
    );
    expect(after.map((r) => r.status)).toEqual(['DONE', 'DONE', 'PENDING']);
    expect(readdirSync(mailDir)).toHaveLength(4);
    // Two emails and the webhooks fan-out for each message (no endpoint here: it writes nothing).
    const outcomes = logEntries(p).filter((e) => e.msg === 'outbox handler outcome');
    expect(outcomes).toHaveLength(6);
    expect(p.lines.join('\n')).not.toContain('@example.test');
  });

  it('--until-empty processes until nothing is due, then exits 0', async () => {
    const rows = await insertMessages(
      tdb.db,
      Array.from({ length: 45 }, () => ({ topic: 'test.noop' })),
    );
    const p = startWorker(TEST_ENTRY, ['--until-empty', '--batch-size', '10', '--concurrency', '4']);
    expect((await p.exit).code).toBe(0);
    expect(
      (
        await getMessages(
          tdb.db,
          rows.map((r) => r.id),
        )
      ).every((r) => r.status === 'DONE'),
    ).toBe(true);
    const summary = logEntries(p).find((e) => e.msg === 'outbox worker stopped');
    expect(summary).toMatchObject({ claimed: 45, done: 45 });
  });
});

describe('drain-outbox signals and crashes', () => {
  it('SIGTERM while a slow handler runs: the handler finishes, its message is DONE, the rest is handed back, exit 0', async () => {
    const [slow, ...rest] = await insertMessages(tdb.db, [
      { topic: 'test.slow' },
      { topic: 'test.noop' },
      { topic: 'test.noop' },
      { topic: 'test.noop' },
    ]);
    const p = startWorker(TEST_ENTRY, ['--concurrency', '1', '--batch-size', '4'], { TEST_SLOW_MS: '1500' });
    await p.waitForLine(/test: slow handler started/);
    p.child.kill('SIGTERM');
    const { code } = await p.exit;
    expect(code).toBe(0);
    expect(p.lines.some((l) => l.includes('test: slow handler finished'))).toBe(true);
    const after = await getMessages(tdb.db, [slow!.id, ...rest.map((r) => r.id)]);
    expect(after[0]).toMatchObject({ status: 'DONE', attempts: 1 });
    for (const r of after.slice(1)) expect(r).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
    expect(logEntries(p).find((e) => e.msg === 'outbox worker stopped')).toMatchObject({ done: 1, handedBack: 3 });
  });

  it('a second SIGTERM exits at once, and the lease keeps the message for a later delivery', async () => {
    const [slow] = await insertMessages(tdb.db, [{ topic: 'test.slow' }]);
    // The shutdown timeout outlasts the handler: only the second signal can end the process first.
    const p = startWorker(TEST_ENTRY, [], { TEST_SLOW_MS: '15000', SHUTDOWN_TIMEOUT_SECONDS: '60' });
    await p.waitForLine(/test: slow handler started/);
    p.child.kill('SIGTERM');
    await p.waitForLine(/stopping: finishing what is in hand/);
    p.child.kill('SIGTERM');
    expect((await p.exit).code).toBe(1);
    // At once: the process ended before its handler did (order of events, not a time bound).
    expect(
      p.lines.some((l) => /test: slow handler finished/.test(l)),
      p.lines.join('\n'),
    ).toBe(false);
    const [row] = await getMessages(tdb.db, [slow!.id]);
    expect(row).toMatchObject({ status: 'PENDING', attempts: 1 });
    expect(row!.claim_id).not.toBeNull(); // leased: comes back when LEASE_SECONDS run out
  });

  it('SIGKILL mid-handler: after the lease another worker delivers it, and nothing is lost', async () => {
    const effects = path.join(mkdtempSync(path.join(os.tmpdir(), 'stayhub-effects-')), 'effects.log');
    writeFileSync(effects, '');
    const rows = await insertMessages(tdb.db, [{ topic: 'test.slow' }, ...Array.from({ length: 10 }, () => ({ topic: 'test.noop' }))]);
    const env = { LEASE_SECONDS: '2', TEST_EFFECTS_FILE: effects };
    const first = startWorker(TEST_ENTRY, ['--concurrency', '2'], { ...env, TEST_SLOW_MS: '30000' });
    await first.waitForLine(/test: slow handler started/);
    first.child.kill('SIGKILL');
    expect((await first.exit).signal).toBe('SIGKILL');
    // The killed worker's lease on the slow message (as its last heartbeat left it), by the database clock.
    const { rows: leased } = await tdb.db.execute<{ lease_end: string }>(
      sql`select leased_until::text as lease_end from outbox where id = ${rows[0]!.id}`,
    );

    const second = startWorker(TEST_ENTRY, [], { ...env, TEST_SLOW_MS: '100' });
    await waitFor(
      async () => {
        const r = await getMessages(
          tdb.db,
          rows.map((m) => m.id),
        );
        return r.every((m) => m.status === 'DONE');
      },
      20_000,
      'every message DONE',
    );
    // Not before the lease of the killed worker ran out: the second claim came after its end.
    const { rows: reclaimed } = await tdb.db.execute<{ after_lease: boolean }>(
      sql`select claimed_at >= ${leased[0]!.lease_end}::timestamptz as after_lease from outbox where id = ${rows[0]!.id}`,
    );
    expect(reclaimed[0]!.after_lease).toBe(true);
    second.child.kill('SIGTERM');
    expect((await second.exit).code).toBe(0);

    const after = await getMessages(
      tdb.db,
      rows.map((m) => m.id),
    );
    expect(after[0]).toMatchObject({ status: 'DONE', attempts: 2 });
    const log = readFileSync(effects, 'utf8').trim().split('\n');
    const slowId = after[0]!.public_id;
    expect(log.filter((l) => l === `test.slow-handler ${slowId} start`)).toHaveLength(2);
    expect(log.filter((l) => l === `test.slow-handler ${slowId} end`)).toHaveLength(1);
    for (const m of after.slice(1)) {
      expect(log.filter((l) => l === `test.noop-handler ${m.public_id} end`).length).toBeGreaterThanOrEqual(1);
    }
  });
});
