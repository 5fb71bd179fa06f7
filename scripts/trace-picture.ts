import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runMigrations } from '../src/db/migrate.ts';
import { registerOutboxHooks } from '../src/outbox/index.ts';
import { startNatsServer } from './lib/nats.ts';
import { startOtlpReceiver, type ReceivedSpan as Span } from './lib/otlp-receiver.ts';
import { startThrowawayPostgres, type ThrowawayPostgres } from './lib/postgres.ts';
import { freePort, startNodeProcess, type NodeProcess } from './lib/processes.ts';
import { startWebhookReceiver } from './lib/webhook-receiver.ts';

/*
 * `node --import tsx scripts/trace-picture.ts [OUT.svg]`: the picture of one booking's trace in
 * docs/observability.md, drawn from spans a real run exported. It starts a throw-away embedded
 * PostgreSQL and a nats-server (Debian's `nats-server`), then the API, the worker and the earnings
 * consumer as the processes they are, each exporting OTLP/HTTP (http/json) to a receiver in this
 * script; registers a host's webhook endpoint on a local receiver, books a stay with one
 * POST /bookings with the worker and the consumer running, stops the three, and draws the trace that request
 * started as a timeline (one row a span, indented under its parent, coloured by process). Where
 * Jaeger runs (docker compose), its UI shows the same trace.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = path.resolve(process.argv[2] ?? path.join(root, 'docs/img/booking-trace.svg'));
const say = (line: string) => process.stdout.write(`[trace-picture] ${line}\n`);

async function api<T>(base: string, method: string, url: string, body?: unknown, token?: string): Promise<T> {
  const res = await fetch(base + url, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

const COLOURS: Record<string, string> = { 'stayhub-api': '#2f6fb3', 'stayhub-worker': '#c0602a', 'stayhub-earnings': '#3d8b4a' };

/** The trace as an SVG timeline: rows in depth-first order, bars on a shared time axis. */
function render(trace: Span[]): string {
  const byParent = new Map<string, Span[]>();
  for (const s of trace) byParent.set(s.parentSpanId, [...(byParent.get(s.parentSpanId) ?? []), s]);
  const ids = new Set(trace.map((s) => s.spanId));
  const rows: { s: Span; depth: number }[] = [];
  const walk = (s: Span, depth: number) => {
    rows.push({ s, depth });
    for (const c of (byParent.get(s.spanId) ?? []).sort((a, b) => a.start - b.start)) walk(c, depth + 1);
  };
  for (const r of trace.filter((s) => !ids.has(s.parentSpanId)).sort((a, b) => a.start - b.start)) walk(r, 0);
  const t0 = Math.min(...trace.map((s) => s.start));
  const t1 = Math.max(...trace.map((s) => s.end));
  const W = 1100;
  const LABEL = 430;
  const ROW = 18;
  const x = (t: number) => LABEL + ((t - t0) / Math.max(1, t1 - t0)) * (W - LABEL - 60);
  const esc = (v: string) => v.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const top = 46;
  const H = top + rows.length * ROW + 40;
  const lines = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="ui-monospace, Menlo, monospace" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="8" y="18" font-size="13" font-weight="bold">One POST /bookings: trace ${trace[0]!.traceId} (${trace.length} spans, ${(t1 - t0).toFixed(1)} ms)</text>`,
    ...Object.entries(COLOURS).map(
      ([service, colour], i) =>
        `<rect x="${8 + i * 170}" y="28" width="10" height="10" fill="${colour}"/><text x="${22 + i * 170}" y="37">${service}</text>`,
    ),
  ];
  rows.forEach(({ s, depth }, i) => {
    const y = top + i * ROW;
    const name = s.name.length > 52 ? `${s.name.slice(0, 51)}…` : s.name;
    lines.push(
      `<text x="${8 + depth * 12}" y="${y + 12}">${esc(name)}</text>`,
      `<rect x="${x(s.start).toFixed(1)}" y="${y + 3}" width="${Math.max(1.5, x(s.end) - x(s.start)).toFixed(1)}" height="11" fill="${COLOURS[s.service] ?? '#888'}"/>`,
      `<text x="${(Math.max(x(s.end), x(s.start) + 1.5) + 4).toFixed(1)}" y="${y + 12}" fill="#555">${(s.end - s.start).toFixed(1)} ms</text>`,
    );
  });
  lines.push(
    `<text x="8" y="${H - 12}" fill="#555">Drawn by scripts/trace-picture.ts from the spans the three processes exported over OTLP/HTTP in one run; time axis from the request's start (0) to ${(t1 - t0).toFixed(1)} ms.</text>`,
    '</svg>',
  );
  return `${lines.join('\n')}\n`;
}

/** A host with a property and a webhook endpoint on the local receiver, and a guest to book it. */
async function hostAndGuest(base: string, hooksUrl: string): Promise<{ guest: string; propertyId: string }> {
  const reg = (role: string) =>
    api<{ token: string }>(base, 'POST', '/auth/register', {
      email: `${role}@example.test`,
      password: 'correct horse battery',
      name: `A ${role}`,
      role,
    });
  const host = (await reg('host')).token;
  const guest = (await reg('guest')).token;
  const property = await api<{ id: string }>(
    base,
    'POST',
    '/properties',
    { title: 'Sea-view flat in Porto', city: 'Porto', country: 'PT', nightlyPrice: 10_000, maxGuests: 4 },
    host,
  );
  await api(base, 'POST', '/webhooks/endpoints', { url: hooksUrl }, host);
  return { guest, propertyId: property.id };
}

/** The trace the POST /bookings request started, drawn into `out`. */
function draw(spans: Span[]): void {
  say(
    `received: ${[...new Set(spans.map((s) => s.service))].map((v) => `${v} ${spans.filter((s) => s.service === v).length}`).join(', ')}`,
  );
  const request = spans.find((s) => s.name === 'POST /bookings');
  if (!request) throw new Error('no POST /bookings span arrived');
  const trace = spans.filter((s) => s.traceId === request.traceId);
  writeFileSync(out, render(trace));
  say(`${trace.length} spans of trace ${request.traceId} from ${[...new Set(trace.map((s) => s.service))].join(', ')}: ${out}`);
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-trace-'));
  // PostgreSQL runs as the "postgres" user when we are root: it must be able to reach its folder.
  chmodSync(dir, 0o755);
  const sink = await startOtlpReceiver();
  let postgres: ThrowawayPostgres | undefined;
  const nats = await startNatsServer({ name: 'trace', dir: path.join(dir, 'nats') });
  const hooks = await startWebhookReceiver();
  let apiProcess: NodeProcess | undefined;
  try {
    postgres = await startThrowawayPostgres({ name: 'trace', dir: path.join(dir, 'pg') });
    const databaseUrl = await postgres.createDatabase('stayhub');
    registerOutboxHooks();
    await runMigrations(databaseUrl);
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      NATS_URL: nats.url,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      MAIL_DIR: path.join(dir, 'mail'),
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
    };
    const run = (entry: string, name: string, extra: NodeJS.ProcessEnv = {}) =>
      startNodeProcess({ entry, env: { ...env, ...extra }, logFile: path.join(dir, `${name}.log`) });
    const apiRun = run('src/commands/api.ts', 'api');
    apiProcess = apiRun;
    const base = `http://127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      if ((await fetch(`${base}/health`).catch(() => undefined))?.ok) break;
      if (i > 300) throw new Error('the API did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
    const { guest, propertyId } = await hostAndGuest(base, hooks.url);
    // The worker and the consumer running, as in production: the booking's effects follow it at once.
    const worker = run('src/commands/drain-outbox.ts', 'worker', { LOG_LEVEL: 'info' });
    const consumer = run('src/commands/consume-earnings.ts', 'consumer', { LOG_LEVEL: 'info' });
    await worker.waitForOutput('outbox worker started');
    await consumer.waitForOutput('earnings consumer running');
    sink.spans.length = 0;
    const checkIn = new Date(Date.now() + 20 * 86_400_000).toISOString().slice(0, 10);
    const checkOut = new Date(Date.now() + 23 * 86_400_000).toISOString().slice(0, 10);
    await api(base, 'POST', '/bookings', { propertyId, checkIn, checkOut, guests: 2 }, guest);
    say('booked; letting the worker and the consumer do their work');
    for (let i = 0; i < 100 && !sink.spans.some((s) => s.service === 'stayhub-earnings'); i++) await new Promise((r) => setTimeout(r, 100));
    // Each process exports what it still holds as it stops.
    for (const p of [consumer, worker, apiRun]) await p.stop();
    draw(sink.spans);
  } finally {
    await apiProcess?.stop(0);
    await hooks.close();
    await nats.destroy();
    await postgres?.stop();
    await sink.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`trace-picture: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
