import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/db.ts';
import { eventsEnv, freshStream, skipWithoutNats, useNats } from '../helpers/nats.ts';
import { killLeftovers, lineMatching, ROOT } from '../helpers/npm-run.ts';

/*
 * The first SIGTERM stops the worker and the consumer within SHUTDOWN_TIMEOUT_SECONDS even when
 * NATS went away under them. The NATS client reconnects forever (src/events/connection.ts), and a
 * drain on a connection that lost its server fails at once and leaves that reconnect loop running:
 * both processes logged "stopped", then stayed alive until something SIGKILLed them. Timing is the
 * behaviour here: the exit must come within the timeout (plus a margin for a loaded machine's
 * process exit), and it must come by itself, not by run-main's last resort (a command that returned
 * and is still held alive is named in the log: "still running after the command returned").
 */

const skip = skipWithoutNats();
const tdb = useTestDatabase('shutdown');
const nats = useNats(skip);
const TIMEOUT_SECONDS = 5;
/** A node process's own exit, and this machine's load, on top of the shutdown itself. */
const MARGIN_MS = 2_000;
const started: number[] = [];
afterAll(() => killLeftovers(started));

function startEntry(entry: string, env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child.pid!);
  const lines: string[] = [];
  for (const s of [child.stdout, child.stderr]) {
    s.setEncoding('utf8');
    s.on('data', (c: string) => lines.push(...c.split('\n').filter(Boolean)));
  }
  const exited = new Promise<{ code: number | null; at: number }>((r) => child.once('exit', (code) => r({ code, at: Date.now() })));
  const waitFor = (pattern: RegExp) =>
    lineMatching(lines, pattern, 30_000, { ended: () => child.exitCode !== null, output: () => lines.join('\n') });
  return { child, lines, exited, waitFor };
}

describe.skipIf(skip)('SIGTERM after NATS went away', () => {
  it(`the worker and the consumer exit 0 within SHUTDOWN_TIMEOUT_SECONDS (${TIMEOUT_SECONDS})`, async () => {
    const env = eventsEnv(tdb.url, nats.url, freshStream('S'), { LOG_LEVEL: 'info', SHUTDOWN_TIMEOUT_SECONDS: String(TIMEOUT_SECONDS) });
    const worker = startEntry('src/worker/drain-outbox.ts', env);
    const consumer = startEntry('src/events/earnings/main.ts', env);
    // The worker declares the stream the consumer reads: each is connected and running.
    await worker.waitFor(/outbox worker started/);
    await consumer.waitFor(/earnings consumer running/);

    await nats.stop();
    // Both clients saw the server go and are reconnecting (every half second).
    await new Promise((r) => setTimeout(r, 1_000));
    const termAt = Date.now();
    worker.child.kill('SIGTERM');
    consumer.child.kill('SIGTERM');
    const deadline = new Promise<'alive'>((r) => setTimeout(() => r('alive'), TIMEOUT_SECONDS * 1000 + MARGIN_MS + 10_000));

    for (const [name, p] of [
      ['worker', worker],
      ['consumer', consumer],
    ] as const) {
      const exit = await Promise.race([p.exited, deadline]);
      const output = p.lines.join('\n');
      expect(exit, `${name} still running long after SIGTERM:\n${output}`).not.toBe('alive');
      const { code, at } = exit as { code: number | null; at: number };
      expect(at - termAt, `${name}'s exit after SIGTERM (ms):\n${output}`).toBeLessThan(TIMEOUT_SECONDS * 1000 + MARGIN_MS);
      expect(code, output).toBe(0);
      expect(output).not.toMatch(/still running after the command returned|shutdown timed out/);
    }
    await nats.start(); // the file's fixture stops it again at the end
  }, 90_000);
});
