import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../../../scripts/lib/otlp-receiver.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { waitFor } from '../../helpers/wait.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The processes as they run: the API and the worker started as child processes with the standard
 * OTEL_* variables, exporting OTLP/HTTP in JSON (http/json) to a receiver this test runs, which
 * decodes what they post. The users and the property are made through an in-process app on the
 * same database (not traced); the booking goes to the API process over HTTP.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const t = useTestApp();

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
});

function start(entry: string, args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, entryArgs(entry, ...args), {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const lines: string[] = [];
  for (const s of [child.stdout, child.stderr]) {
    let rest = '';
    s.setEncoding('utf8');
    s.on('data', (c: string) => {
      const parts = (rest + c).split('\n');
      rest = parts.pop()!;
      lines.push(...parts);
    });
  }
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const json = () =>
    lines.flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, any>];
      } catch {
        return [];
      }
    });
  return { child, lines, exited, json };
}

let receiver: OtlpReceiver | undefined;
afterAll(async () => {
  await receiver?.close();
});

describe('OTLP over HTTP (http/json) from the API and worker processes', () => {
  it('delivers their spans to the receiver with one trace id, and the email handler logs it', async () => {
    receiver = await startOtlpReceiver();
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host);

    const tracing = {
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      // Export within a fifth of a second rather than the default five.
      OTEL_BSP_SCHEDULE_DELAY: '200',
    };
    const port = await freePort();
    const api = start('src/commands/api.ts', [], {
      ...tracing,
      DATABASE_URL: t.db.url,
      HOST: '127.0.0.1',
      PORT: String(port),
      LOG_FORMAT: 'json',
    });
    await waitFor(
      async () => api.lines.some((l) => l.includes('listening')) || (api.child.exitCode !== null && 'exited'),
      90_000,
      'the API',
    );
    expect(api.child.exitCode, api.lines.join('\n')).toBeNull();

    const res = await fetch(`http://127.0.0.1:${port}/bookings`, {
      method: 'POST',
      headers: { ...guest.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ propertyId: property.id, checkIn: daysFromNow(30), checkOut: daysFromNow(32), guests: 2 }),
    });
    expect(res.status).toBe(201);

    const worker = start('src/commands/drain-outbox.ts', ['--until-empty'], {
      ...tracing,
      DATABASE_URL: t.db.url,
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'debug',
      MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
    });
    expect(await worker.exited, worker.lines.join('\n')).toBe(0);
    api.child.kill('SIGTERM');
    expect(await api.exited).toBe(0);

    // Both processes flush what they hold as they stop: everything has arrived now.
    const spans = receiver.spans;
    const request = spans.find((s) => s.service === 'stayhub-api' && s.name === 'POST /bookings');
    expect(request, spans.map((s) => `${s.service} ${s.name}`).join('\n')).toBeDefined();
    const traceId = request!.traceId;
    const handling = spans.filter((s) => s.service === 'stayhub-worker' && s.name === 'process booking.created');
    expect(handling).toHaveLength(1);
    expect(handling[0]!.traceId).toBe(traceId);
    const workerSpans = spans.filter((s) => s.service === 'stayhub-worker' && s.traceId === traceId).map((s) => s.name);
    expect(workerSpans).toEqual(expect.arrayContaining(['email.guest-confirmation', 'email.host-new-booking', 'send email']));
    expect(new Set(receiver.contentTypes)).toEqual(new Set(['application/json']));

    // The email handler's log line carries the request's trace id, and the id of its handler's span.
    const sent = worker.json().filter((l) => l.msg === 'email sent');
    expect(sent.length, worker.lines.join('\n')).toBe(2);
    for (const line of sent) {
      expect(line.trace_id).toBe(traceId);
      const span = spans.find((s) => s.spanId === line.span_id);
      expect(span?.name).toBe(line.handler);
    }
    // Two processes started with tsx on a machine that may be busy: their start-up is most of the time.
  }, 180_000);
});
