import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';

/*
 * `npm start` as a person meets it: in a terminal (a real pseudo-terminal from `script`). Its
 * children's logs are pretty and prefixed, one banner says where everything is once the API
 * answers, and Ctrl-C (typed into the terminal) stops it all cleanly.
 */

const root = path.resolve(import.meta.dirname, '../../..');
const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-start-tty-'));
chmodSync(dir, 0o755);
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// eslint-disable-next-line no-control-regex
const stripAnsi = (s: string) => s.replace(/\u001b\[[0-9;]*m/g, '').replace(/\r/g, '');

describe('npm start in a terminal', () => {
  it('prints pretty [api]/[worker] logs and one banner, and stops on Ctrl-C', async () => {
    const [pgPort, apiPort] = [await freePort(), await freePort()];
    const { DATABASE_URL: _d, LOG_FORMAT: _f, SMTP_URL: _s, FORCE_COLOR: _c, NO_COLOR: _n, ...inherited } = process.env;
    const env = {
      ...inherited,
      ENV_FILE: '',
      EMBEDDED_PG_DIR: path.join(dir, 'pg'),
      EMBEDDED_PG_PORT: String(pgPort),
      PORT: String(apiPort),
      MAIL_DIR: path.join(dir, 'mail'),
      LOG_LEVEL: 'info',
    };
    // `exec`: script(1) runs the command through $SHELL, or /bin/sh when SHELL is unset (as in CI).
    // dash stays in the terminal's foreground group as node's parent, and Ctrl-C kills it (130)
    // while node is still stopping; a person's interactive shell execs the job, so we do too.
    const child = spawn('script', ['-qec', 'exec node --import tsx src/commands/start.ts', '/dev/null'], {
      cwd: root,
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let raw = '';
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no banner within 90 s:\n${raw}`)), 90_000);
      child.stdout.on('data', (c) => {
        raw += c;
        if (raw.includes('Stop       Ctrl-C')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    child.stderr.on('data', (c) => (raw += c));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await ready;
      const base = `http://127.0.0.1:${apiPort}`;
      const front = await fetch(`${base}/`);
      expect(front.headers.get('content-type')).toMatch(/^text\/html/);
    } finally {
      child.stdin.write('\x03'); // Ctrl-C at the keyboard: the terminal sends SIGINT to start
    }
    expect(await exited).toBe(0);

    const out = stripAnsi(raw);
    const base = `http://127.0.0.1:${apiPort}`;
    const banner = out.slice(out.indexOf('[start] StayHub is ready'));
    expect(out.match(/StayHub is ready/g)).toHaveLength(1);
    expect(banner).toContain(`API        ${base}/`);
    expect(banner).toContain(`API docs   ${base}/docs`);
    expect(banner).toContain(`Dashboard  ${base}/admin`);
    expect(banner).toContain('npm run create-admin');
    expect(banner).toContain(`Emails     written as .eml files to ${path.join(dir, 'mail')}`);
    expect(banner).toContain('npm run seed');
    expect(banner).toContain('Ctrl-C');
    // The banner comes after the API says it listens.
    expect(out.indexOf('Server listening')).toBeLessThan(out.indexOf('StayHub is ready'));
    // Pretty and prefixed, no JSON lines from the children; coloured, since this is a terminal.
    expect(out).toMatch(/^\[api\] \[\d\d:\d\d:\d\d\.\d{3}\] INFO \(api\): Server listening at/m);
    expect(out).toMatch(/^\[worker\] \[\d\d:\d\d:\d\d\.\d{3}\] INFO \(worker\): outbox worker started/m);
    expect(out).not.toMatch(/^\[(api|worker)\] \{"level"/m);
    expect(raw).toContain('\u001b[');
    expect(out).toContain('[start] stopped');
  }, 150_000);
});
