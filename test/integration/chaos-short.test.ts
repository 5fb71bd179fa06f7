import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { ChaosResults } from '../../scripts/chaos/run.ts';

/*
 * The short chaos variant, as CI runs it (`npm test` in .ci/run): `npm run chaos` for 45 s of load
 * with a fixed seed (CHAOS_SEED overrides it), as a separate process with its own embedded
 * Postgres, API, two workers and SMTP server. It passes only if the run's invariants all held;
 * a failure prints the run's own report (violations, seed to reproduce).
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const out = mkdtempSync(path.join(os.tmpdir(), 'stayhub-chaos-short-'));
const seed = process.env.CHAOS_SEED ?? '20261130';
const duration = process.env.CHAOS_DURATION ?? '45';

afterAll(() => rmSync(out, { recursive: true, force: true }));

function runChaos(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/chaos/run.ts', '--duration', duration, '--seed', seed, '--out', out], {
      cwd: root,
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c) => (output += c));
    child.stderr.on('data', (c) => (output += c));
    child.on('exit', (code) => resolve({ code, output }));
  });
}

describe('chaos (short variant)', () => {
  it(
    'nothing is lost under worker/API kills, an SMTP outage, a Postgres restart and terminated connections',
    async () => {
      const { code, output } = await runChaos();
      const file = path.join(out, 'chaos-results.json');
      expect(existsSync(file), `the run wrote no results (exit ${code}):\n${output.slice(-4000)}`).toBe(true);
      const r = JSON.parse(readFileSync(file, 'utf8')) as ChaosResults;
      const report = readFileSync(path.join(out, 'chaos-results.md'), 'utf8');

      for (const check of r.checks) expect(check.ok, `${check.name}\n\n${report}`).toBe(true);
      expect(code, report).toBe(0);

      // The run did what it claims: real load, every kind of fault, mail actually flowing.
      expect(r.figures.bookingsMade).toBeGreaterThan(20);
      expect(r.figures.bookingsInDatabase.cancelled).toBeGreaterThan(0);
      expect(r.figures.load.conflicts409).toBeGreaterThan(0);
      expect(r.figures.load.replays).toBeGreaterThan(0); // Idempotency-Key replays happened, and agreed
      for (const [kind, n] of Object.entries(r.figures.faults)) expect(n, `faults of kind ${kind}`).toBeGreaterThan(0);
      expect(r.figures.faults['worker-kill']).toBeGreaterThanOrEqual(3);
      expect(r.figures.mail.delivered).toBeGreaterThan(r.figures.bookingsMade);
      expect(r.figures.mail.lost).toBe(0);
      expect(r.figures.mail.refused451).toBeGreaterThan(0);
      expect(r.figures.outbox.dead).toBeGreaterThan(0); // the 550 recipients' messages
    },
    300_000,
  );
});
