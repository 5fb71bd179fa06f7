import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { format, resolveConfig } from 'prettier';
import { describe, expect, it } from 'vitest';
import { judge } from '../../../scripts/chaos/verdict.ts';
import { runProcess } from '../../../scripts/lib/processes.ts';
import { untidyEvidence } from '../../helpers/chaos-evidence.ts';

/*
 * The chaos judge, pinned: untidy evidence drawn from fixed seeds (test/helpers/chaos-evidence.ts:
 * mail lost or misdirected, events missing, crashes, faults without effect, slow mail during NATS
 * outages…) goes through every rule, and the verdicts — which checks, in which order and words,
 * each one's violations, the figures — must stay exactly those in the snapshot beside this file.
 * The snapshot was written by the judge before its rules were split into modules of their own
 * (scripts/chaos/rules/): a change of what any rule judges, or how it says so, shows up here. A
 * deliberate change of a rule updates the snapshot (`npx vitest run -u`) in the same commit, and
 * the diff shows what it changed.
 */

const SNAPSHOT = path.join(import.meta.dirname, '__snapshots__', 'chaos-judge-golden.json');
const SEEDS = Array.from({ length: 40 }, (_, i) => i + 1);

describe('chaos judge on fixed untidy evidence', () => {
  it('gives the same verdicts as when the snapshot was taken', async () => {
    const verdicts = SEEDS.map((seed) => ({ seed, verdict: judge(untidyEvidence(seed)) }));
    // Each rule is reached both ways across the seeds, or the snapshot pins less than it seems.
    const outcomes = new Map<string, Set<boolean>>();
    for (const { verdict } of verdicts) for (const c of verdict.checks) outcomes.set(c.name, (outcomes.get(c.name) ?? new Set()).add(c.ok));
    const oneWay = [...outcomes].filter(([, seen]) => seen.size < 2).map(([name]) => name);
    expect(oneWay).toEqual([]);
    // Written as the repository's formatter writes JSON, so `npm run format` leaves it alone.
    const text = await format(JSON.stringify(verdicts), { ...(await resolveConfig(SNAPSHOT)), parser: 'json' });
    await expect(text).toMatchFileSnapshot(SNAPSHOT);
  });
});

describe('npm run chaos -- --judge FILE', () => {
  it('judges a saved input again: the same verdict as the judge, and its exit code', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-chaos-judge-'));
    try {
      for (const seed of [3, 11]) {
        const input = untidyEvidence(seed);
        const file = path.join(dir, `judge-input-${seed}.json`);
        writeFileSync(file, JSON.stringify(input));
        const run = await runProcess(process.execPath, ['--import', 'tsx', 'scripts/chaos/run.ts', '--judge', file]);
        const verdict = judge(input);
        expect(JSON.parse(run.stdout), run.stderr).toEqual(JSON.parse(JSON.stringify(verdict)));
        expect(run.code).toBe(verdict.ok ? 0 : 1);
      }
      // A file it cannot read: one line naming it, exit 2, no stack trace.
      const missing = await runProcess(process.execPath, [
        '--import',
        'tsx',
        'scripts/chaos/run.ts',
        '--judge',
        path.join(dir, 'none.json'),
      ]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toMatch(/^chaos: --judge .*none\.json: ENOENT/);
      expect(missing.stderr).not.toMatch(/^\s+at /m);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
