import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { resolveLogFormat } from '../../../src/logger.ts';
import { childLogEnv } from '../../../src/process/start-console.ts';

/*
 * Logs a person can read at a terminal, one JSON object a line everywhere else. The probe logs
 * one line through the same path as the API and the worker (loadConfig → LOG_FORMAT →
 * createLogger); it runs once with stdout a pipe and once under `script`, which gives it a real
 * pseudo-terminal.
 */

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../../..');
const PROBE = 'node --import tsx test/helpers/log-probe.ts';
// eslint-disable-next-line no-control-regex
const stripAnsi = (s: string) => s.replace(/\u001b\[[0-9;]*m/g, '');

function envWith(extra: Record<string, string>): NodeJS.ProcessEnv {
  const { LOG_FORMAT: _f, FORCE_COLOR: _c, NO_COLOR: _n, ...env } = process.env;
  return { ...env, ENV_FILE: '', LOG_LEVEL: 'info', ...extra };
}

async function probe(opts: { tty: boolean; format?: string }) {
  const env = envWith(opts.format ? { LOG_FORMAT: opts.format } : {});
  const { stdout } = opts.tty
    ? await run('script', ['-qec', PROBE, '/dev/null'], { cwd: root, env })
    : await run('sh', ['-c', PROBE], { cwd: root, env });
  return stdout;
}

function expectJson(out: string) {
  const lines = out
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  expect(lines).toHaveLength(1);
  const line = JSON.parse(lines[0]!);
  expect(line).toMatchObject({ level: 30, name: 'probe', answer: 42, msg: 'hello from the probe' });
}

function expectPretty(out: string) {
  const text = stripAnsi(out);
  // One terminal line for one log line: its fields beside the message, not a line each.
  expect(text.trim().split('\n')).toHaveLength(1);
  expect(text).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(probe\): hello from the probe \{"answer":42\}\r?$/m);
  expect(() => JSON.parse(text.trim())).toThrow();
}

describe('log format', () => {
  it('auto: pretty (with colours) on a terminal', async () => {
    const out = await probe({ tty: true });
    expectPretty(out);
    expect(out).toContain('\u001b['); // coloured
  });

  it('auto: one JSON object a line when stdout is not a terminal', async () => {
    expectJson(await probe({ tty: false }));
  });

  it('LOG_FORMAT=json forces JSON on a terminal; LOG_FORMAT=pretty forces pretty into a pipe', async () => {
    expectJson(stripAnsi(await probe({ tty: true, format: 'json' })));
    const piped = await probe({ tty: false, format: 'pretty' });
    expectPretty(piped);
    expect(piped).not.toContain('\u001b['); // no colour codes in a file
  });

  it('the decision', () => {
    expect(resolveLogFormat('auto', true)).toBe('pretty');
    expect(resolveLogFormat('auto', false)).toBe('json');
    expect(resolveLogFormat('json', true)).toBe('json');
    expect(resolveLogFormat('pretty', false)).toBe('pretty');
  });

  it('npm start tells its children what its own stdout is (theirs is always a pipe)', () => {
    expect(childLogEnv({ LOG_FORMAT: 'auto' }, true, {})).toEqual({ LOG_FORMAT: 'pretty', FORCE_COLOR: '1' });
    expect(childLogEnv({ LOG_FORMAT: 'auto' }, true, { NO_COLOR: '' })).toEqual({ LOG_FORMAT: 'pretty' });
    expect(childLogEnv({ LOG_FORMAT: 'auto' }, false, {})).toEqual({ LOG_FORMAT: 'json' });
    expect(childLogEnv({ LOG_FORMAT: 'json' }, true, {})).toEqual({ LOG_FORMAT: 'json' });
    expect(childLogEnv({ LOG_FORMAT: 'pretty' }, false, {})).toEqual({ LOG_FORMAT: 'pretty' });
  });
});
