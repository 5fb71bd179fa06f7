import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { startNodeProcess } from '../../../scripts/lib/processes.ts';

/*
 * How the scripts start a long-running child (scripts/lib/processes.ts): what must hold whatever
 * happens to the files around it.
 */

const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-processes-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('startNodeProcess', () => {
  it('loses the log, not the process that started the child, when the log cannot be opened', async () => {
    const entry = path.join(dir, 'idle.mjs');
    writeFileSync(entry, "console.log('idle'); setInterval(() => {}, 1000);\n");
    const said: string[] = [];
    const write = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (said.push(String(chunk)), true));
    try {
      const p = startNodeProcess({ entry, env: { PATH: process.env.PATH }, logFile: path.join(dir, 'gone', 'idle.log') });
      await p.waitForOutput('idle', 30_000);
      await p.stop(2_000);
      expect((await p.exited).signal).toBe('SIGTERM');
    } finally {
      write.mockRestore();
    }
    expect(said.join('')).toMatch(/idle\.mjs: its log .*gone\/idle\.log cannot be written: ENOENT/);
  });
});
