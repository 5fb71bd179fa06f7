import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import { killLeftovers, npmRun } from '../../helpers/npm-run.ts';

/*
 * `npm start` when another program already listens on the embedded PostgreSQL's port: it used to
 * say only "postgres exited with code 1 while starting". It must stop, non-zero and soon, and its
 * last words must name the port and the setting that moves it.
 */

const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-port-taken-'));
chmodSync(dir, 0o755);
const listener = net.createServer();
afterAll(async () => {
  await new Promise((r) => listener.close(r));
  rmSync(dir, { recursive: true, force: true });
});

describe('npm start with the embedded port taken', () => {
  it('exits non-zero within 30 s, naming the port and EMBEDDED_PG_PORT', async () => {
    const port = await freePort();
    await new Promise<void>((r) => listener.listen(port, '127.0.0.1', r));
    const env: NodeJS.ProcessEnv = { ...process.env, EMBEDDED_PG_DIR: path.join(dir, 'pg'), EMBEDDED_PG_PORT: String(port) };
    delete env.DATABASE_URL;
    const run = npmRun(['start'], env);
    const exited = new Promise<number | null>((r) => run.npm.once('exit', (code) => r(code)));
    const timedOut = new Promise<'running'>((r) => setTimeout(() => r('running'), 30_000));
    const code = await Promise.race([exited, timedOut]);
    killLeftovers([run.npm.pid!]);
    await run.closed;
    const output = run.lines.join('\n');
    expect(code, output).not.toBe('running');
    expect(code, output).not.toBe(0);
    // npm adds its own lines after the script's ("Lifecycle script `start` failed…"): the script's last line.
    const last = run.lines.filter((l) => l.trim() && !l.startsWith('npm ')).at(-1);
    expect(last).toContain(`port ${port}`);
    expect(last).toContain('EMBEDDED_PG_PORT');
  }, 60_000);
});
