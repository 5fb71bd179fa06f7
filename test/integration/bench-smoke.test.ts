import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

/*
 * `npm run bench -- --smoke`: every measurement of the benchmark once, on tiny inputs, against its
 * own embedded PostgreSQL (not the test server: the bench needs default settings, fsync on).
 * What is asserted is that every figure comes out (a broken section, a renamed column, a peer
 * upgrade that changes an API all fail here), not how fast anything is: smoke inputs are too
 * small for the numbers to mean anything.
 */

const root = path.resolve(import.meta.dirname, '../..');
const out = mkdtempSync(path.join(os.tmpdir(), 'stayhub-bench-smoke-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const finitePositive = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v > 0;

describe('npm run bench -- --smoke', () => {
  it('runs every measurement and writes every figure', { timeout: 240_000 }, () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/bench/run.ts', '--smoke', '--out', out], {
      cwd: root,
      encoding: 'utf8',
      timeout: 230_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);

    const r = JSON.parse(readFileSync(path.join(out, 'bench-results.json'), 'utf8'));
    expect(r.mode).toBe('smoke');
    expect(r.errors).toEqual([]);
    expect(r.machine.cores).toBeGreaterThan(0);
    expect(r.postgresSettings.fsync).toBe('on');
    expect(r.postgresSettings.synchronous_commit).toBe('on');

    for (const system of ['ours1', 'ours2', 'graphile', 'pgBoss']) {
      expect(finitePositive(r.drain[system].median.perSecond), `drain ${system}`).toBe(true);
    }
    for (const system of ['ours', 'graphile', 'pgBoss']) {
      for (const k of ['p50', 'p99', 'max']) expect(finitePositive(r.latency[system].median[k]), `latency ${system} ${k}`).toBe(true);
    }
    for (const processes of ['1', '2', '4']) {
      expect(finitePositive(r.io.byProcesses[processes].median.perSecond), `io ×${processes}`).toBe(true);
    }
    expect(finitePositive(r.claim.runs.median.emptyMs)).toBe(true);
    expect(finitePositive(r.claim.runs.median.withHistoryMs)).toBe(true);
    // The plan must show the claim walking the partial index of PENDING rows.
    expect(r.claim.explain).toContain('outbox_pending_available_idx');

    expect(r.api.byConnections.map((c: { connections: number }) => c.connections)).toEqual([1, 8, 32]);
    for (const c of r.api.byConnections) expect(finitePositive(c.api.median.rps), `API at ${c.connections}`).toBe(true);
    expect(r.api.non201).toBe(0); // every stay asked for was free

    // Contention: one winner per round, clean 409s for the rest, never a 5xx.
    expect(r.conflicts.runs.median.created201).toBeGreaterThanOrEqual(1);
    expect(r.conflicts.runs.median.share409).toBeGreaterThan(50);
    expect(r.conflicts.runs.median.server5xx).toBe(0);
    expect(r.conflicts.runs.median.other).toBe(0);

    if (r.versions.pgbench) {
      for (const c of r.api.byConnections) {
        expect(finitePositive(c.pgbench.median.tps), `pgbench at ${c.connections}`).toBe(true);
        expect(finitePositive(c.ratio)).toBe(true);
      }
      expect(finitePositive(r.outboxCost.ratio)).toBe(true);
      expect(r.targets.every((t: { met: boolean | null }) => t.met !== null)).toBe(true);
    } else {
      // Without pgbench the run says how to install it and leaves those figures out.
      expect(run.stdout).toContain('apt-get install -y postgresql-client');
      expect(r.outboxCost).toBeNull();
    }
    expect(r.targets).toHaveLength(8);

    const md = readFileSync(path.join(out, 'bench-results.md'), 'utf8');
    for (const heading of ['## Machine and versions', '## Targets', '## 1. Drain', '## 2. Commit', '## 3. The booking', '## 4. What the outbox', '## 5. Claim', '## 6. Scaling', '## 7. Conflicts']) {
      expect(md).toContain(heading);
    }
  });
});
