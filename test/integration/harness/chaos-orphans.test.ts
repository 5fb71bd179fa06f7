import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { natsServerAvailable } from '../../../scripts/chaos/events/nats-cluster.ts';
import { lifelineEnv } from '../../../src/process/lifeline.ts';
import { compiledTreeEnv } from '../../../scripts/lib/processes.ts';
import { commandOf, descendants, isRunning, killLeftovers, lineMatching, ROOT } from '../../helpers/npm-run.ts';

/*
 * The chaos run SIGKILLed (what a CI time limit does to a test run, and what leaves no chance to
 * clean up): its whole stack must go with it. The API, the two workers, the SMTP sink and the
 * earnings consumer carry the run's lifeline (scripts/chaos/processes.ts); PostgreSQL and
 * nats-server, which are not node processes, have a watchdog each (src/db/orphan-watchdog.ts).
 * Once they have gone, the watchdogs exit too. Before, the stack ran on, orphaned, for as long as
 * nobody looked (39 minutes in the case that was reported).
 *
 * Only the start of the stack is run: the run is killed as soon as its load begins.
 *
 * Slow (about 13 s alone): the chaos run's stack is started for real, SIGKILLed, and every process
 * and watchdog is waited for.
 */

const out = mkdtempSync(path.join(os.tmpdir(), 'stayhub-chaos-orphans-'));
const leftovers: number[] = [];
const stages: string[] = [];
afterAll(() => {
  killLeftovers(leftovers);
  for (const d of [out, ...stages]) rmSync(d, { recursive: true, force: true });
});

/** How long the stack may take to notice and stop: the workers' SHUTDOWN_TIMEOUT_SECONDS is 5. */
const GONE_WITHIN_MS = 10_000;

describe('chaos run SIGKILLed', () => {
  it(`leaves none of its processes running after ${GONE_WITHIN_MS / 1000} s`, async () => {
    const run = spawn(process.execPath, ['--import', 'tsx', 'scripts/chaos/run.ts', '--duration', '10', '--seed', '7', '--out', out], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...lifelineEnv(), ...compiledTreeEnv() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    leftovers.push(run.pid!);
    const lines: string[] = [];
    for (const s of [run.stdout, run.stderr]) {
      s.setEncoding('utf8');
      s.on('data', (c: string) => lines.push(...c.split('\n')));
    }
    await lineMatching(lines, /\] load for \d+ s/, 120_000, { ended: () => run.exitCode !== null, output: () => lines.join('\n') });

    const pids = descendants(run.pid!);
    leftovers.push(...pids);
    const commands = pids.map(commandOf);
    const postgres = commands.find((c) => /\/postgres -D /.test(c));
    // The stage folder (the run would have removed it): the parent of PostgreSQL's data folder.
    const stage = / -D (\S+)\/pg /.exec(postgres ?? '')?.[1];
    if (stage?.includes('stayhub-chaos-')) stages.push(stage);
    // The whole stack was up: the test kills what it means to.
    expect(postgres, commands.join('\n')).toBeDefined();
    // Entries without their extension: .ts through tsx, .js from the test run's compiled tree.
    const expected = ['src/commands/api.', 'src/commands/drain-outbox.', 'scripts/chaos/smtp-sink.'];
    if (natsServerAvailable()) expected.push('nats-server -js', 'src/commands/consume-earnings.');
    for (const entry of expected) {
      expect(
        commands.some((c) => c.includes(entry)),
        `${entry} among\n${commands.join('\n')}`,
      ).toBe(true);
    }

    run.kill('SIGKILL');
    const killedAt = Date.now();
    const deadline = Date.now() + GONE_WITHIN_MS;
    let left = pids.filter(isRunning);
    while (left.length && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      left = left.filter(isRunning);
    }
    expect(left.map((p) => `${p} ${commandOf(p)}`)).toEqual([]);
    console.info(`chaos run SIGKILLed: its ${pids.length} processes gone within ${Date.now() - killedAt} ms`);
  }, 180_000);
});
