import { readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { createMailer } from '../../../src/mail/mailer.ts';
import { guestCancellation, guestConfirmation, hostCancellation, hostNewBooking } from '../../../src/worker/handlers/booking-emails.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { startSmtpServer, type TestSmtpServer } from '../../helpers/smtp.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { getMessage, insertMessage, makeDue } from '../../helpers/outbox-rows.ts';

/*
 * The real email handlers through a real SMTP server (smtp-server, in this process) and through
 * the .eml file sink. The delivered mail is parsed with mailparser and read like a mail client would.
 */

let tdb: TestDatabase;
let smtp: TestSmtpServer;
beforeAll(async () => {
  tdb = await createTestDatabase('mail');
  smtp = await startSmtpServer();
});
afterAll(async () => {
  await smtp?.close();
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.db.execute(sql`truncate outbox`);
  smtp.received.length = 0;
});

function emailWorker(env: Record<string, string>) {
  const config = workerConfig(tdb, env);
  const mailer = createMailer(config);
  const { logger, entries } = captureLogger();
  const worker = createConfiguredWorker({
    db: tdb.db,
    config,
    // The four email handlers of the production list (src/worker/handlers/index.ts).
    registry: new HandlerRegistry(
      [guestConfirmation, hostNewBooking, guestCancellation, hostCancellation].map((h) => h({ config, mailer })),
    ),
    logger,
    listen: false,
    housekeeping: false,
  });
  return {
    worker,
    config,
    entries,
    async close() {
      await worker.stop();
      mailer.close();
    },
  };
}

describe('SMTP', () => {
  it('sends the guest confirmation and the host notice with real content, stable Message-ID and X-Idempotency-Key', async () => {
    const w = emailWorker({ SMTP_URL: smtp.url });
    const p = bookingPayload({
      propertyTitle: 'Loft <b>"Rooftop"</b> & garden',
      total: 123_456,
      currency: 'EUR',
      checkIn: '2026-12-04',
      checkOut: '2026-12-07',
      nights: 3,
    });
    const m = await insertMessage(tdb.db, 'booking.created', p, p.bookingId);
    await w.worker.runOnce();
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'DONE' });
    expect(smtp.received).toHaveLength(2);

    const guest = smtp.received.find((r) => r.to[0] === 'guest@example.test')!.parsed;
    const host = smtp.received.find((r) => r.to[0] === 'host@example.test')!.parsed;
    expect(guest.subject).toBe('Booking confirmed: Loft <b>"Rooftop"</b> & garden, Fri 4 Dec 2026 – Mon 7 Dec 2026');
    expect(host.subject).toBe('New booking: Loft <b>"Rooftop"</b> & garden, Fri 4 Dec 2026 – Mon 7 Dec 2026');
    expect(guest.messageId).toBe(`<booking-created.${p.bookingId}.email.guest-confirmation@stayhub.test>`);
    expect(host.messageId).toBe(`<booking-created.${p.bookingId}.email.host-new-booking@stayhub.test>`);
    expect(guest.headers.get('x-idempotency-key')).toBe(`booking-created:${p.bookingId}`);
    expect(guest.from?.value).toEqual([{ name: 'StayHub', address: 'no-reply@stayhub.test' }]);
    for (const mail of [guest, host]) {
      expect(mail.text).toContain('€1,234.56');
      expect(mail.text).toContain(p.bookingId);
      expect(mail.text).toMatch(/Nights:\s+3/);
      expect(mail.text).toContain('Fri 4 Dec 2026');
      expect(mail.text).toContain('Loft <b>"Rooftop"</b> & garden');
      // The title is text in the HTML, not markup.
      expect(mail.html).toContain('Loft &lt;b&gt;&quot;Rooftop&quot;&lt;/b&gt; &amp; garden');
      expect(mail.html).not.toContain('<b>"Rooftop"</b>');
      expect(mail.html).toContain('€1,234.56');
    }
    expect(guest.text).toContain('Hello Gina Guest,');
    expect(host.text).toContain('Hello Hal Host,');
    await w.close();
  });

  it('sends both cancellation emails', async () => {
    const w = emailWorker({ SMTP_URL: smtp.url });
    const base = bookingPayload({ currency: 'JPY', total: 54_000 });
    const p = { ...base, idempotencyKey: `booking-cancelled:${base.bookingId}`, cancelledBy: 'guest' as const };
    await insertMessage(tdb.db, 'booking.cancelled', p, p.bookingId);
    await w.worker.runOnce();
    const subjects = smtp.received.map((r) => `${r.to[0]} ${r.parsed.subject}`).sort();
    expect(subjects).toEqual([
      'guest@example.test Booking cancelled: Cabin by the lake, Fri 4 Dec 2026 – Mon 7 Dec 2026',
      'host@example.test Booking cancelled: Cabin by the lake, Fri 4 Dec 2026 – Mon 7 Dec 2026',
    ]);
    const guest = smtp.received.find((r) => r.to[0] === 'guest@example.test')!.parsed;
    expect(guest.text).toContain('cancelled at your request');
    expect(guest.text).toContain('¥54,000');
    expect(guest.messageId).toBe(`<booking-cancelled.${p.bookingId}.email.guest-cancellation@stayhub.test>`);
    const host = smtp.received.find((r) => r.to[0] === 'host@example.test')!.parsed;
    expect(host.text).toContain('cancelled by the guest');
    await w.close();
  });

  it('a 4xx reply is retried (only the email that failed), a 5xx reply is DEAD at once', async () => {
    const w = emailWorker({ SMTP_URL: smtp.url });
    const p = bookingPayload();
    const m = await insertMessage(tdb.db, 'booking.created', p, p.bookingId);
    smtp.reject(451, 1, 'host@example.test');
    await w.worker.runOnce();
    let row = await getMessage(tdb.db, m.id);
    expect(row).toMatchObject({ status: 'PENDING', attempts: 1, handlers_done: ['email.guest-confirmation'] });
    expect(row.last_error).toMatch(/^email.host-new-booking: Error\(EENVELOPE\): .*451/);
    expect(smtp.received.map((r) => r.to[0])).toEqual(['guest@example.test']);

    await makeDue(tdb.db);
    await w.worker.runOnce();
    row = await getMessage(tdb.db, m.id);
    expect(row).toMatchObject({ status: 'DONE', attempts: 2 });
    // The retry sent the host's email only: the guest got exactly one.
    expect(smtp.received.map((r) => r.to[0])).toEqual(['guest@example.test', 'host@example.test']);

    const q = bookingPayload();
    const dead = await insertMessage(tdb.db, 'booking.created', q, q.bookingId);
    smtp.reject(550, 1, 'guest@example.test');
    await w.worker.runOnce();
    row = await getMessage(tdb.db, dead.id);
    expect(row).toMatchObject({ status: 'DEAD', attempts: 1, handlers_done: ['email.host-new-booking'] });
    expect(row.last_error).toMatch(/^email.guest-confirmation: Error\(EENVELOPE\): .*550/);
    expect(row.last_error).not.toContain('@example.test');
    expect(JSON.stringify(w.entries())).not.toContain('@example.test');
    await w.close();
  });

  it('a refused connection and a server that never answers (timeout) are retried', async () => {
    // Nobody listens on port 9: connection refused.
    const refused = emailWorker({ SMTP_URL: 'smtp://127.0.0.1:9?ignoreTLS=true', SMTP_TIMEOUT_MS: '500' });
    const a = await insertMessage(tdb.db, 'booking.created', bookingPayload());
    await refused.worker.runOnce();
    let row = await getMessage(tdb.db, a.id);
    expect(row).toMatchObject({ status: 'PENDING', attempts: 1, handlers_done: [] });
    expect(row.last_error).toMatch(/ECONNREFUSED|ECONNECTION/);
    await refused.close();

    // A server that accepts the connection and never sends its greeting.
    const silent = net.createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const port = (silent.address() as net.AddressInfo).port;
    const hung = emailWorker({ SMTP_URL: `smtp://127.0.0.1:${port}?ignoreTLS=true`, SMTP_TIMEOUT_MS: '300' });
    await makeDue(tdb.db);
    const started = performance.now();
    await hung.worker.runOnce();
    // SMTP_TIMEOUT_MS (300 ms) ends the wait, not nodemailer's own 30 s greeting timeout; the bound
    // sits far from both, so a busy machine cannot cross it either way.
    expect(performance.now() - started).toBeLessThan(15_000);
    row = await getMessage(tdb.db, a.id);
    expect(row).toMatchObject({ status: 'PENDING', attempts: 2, handlers_done: [] });
    expect(row.last_error).toMatch(/ETIMEDOUT/);
    await hung.close();
    silent.close();
  });
});

describe('file sink', () => {
  it('writes one .eml per email, named by Message-ID, and a redelivery rewrites the same file', async () => {
    const w = emailWorker({});
    const p = bookingPayload();
    const m = await insertMessage(tdb.db, 'booking.created', p, p.bookingId);
    await w.worker.runOnce();
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'DONE' });
    const files = readdirSync(w.config.MAIL_DIR).sort();
    expect(files).toEqual([
      `booking-created.${p.bookingId}.email.guest-confirmation@stayhub.test.eml`,
      `booking-created.${p.bookingId}.email.host-new-booking@stayhub.test.eml`,
    ]);
    const raw = readFileSync(path.join(w.config.MAIL_DIR, files[0]!));
    expect(raw.toString()).toContain('\r\n'); // RFC 822 line endings
    const parsed = await simpleParser(raw);
    expect(parsed.subject).toMatch(/^Booking confirmed: Cabin by the lake/);
    expect(parsed.headers.get('x-idempotency-key')).toBe(p.idempotencyKey);

    // At-least-once: the same message delivered again (a worker died before recording it).
    await tdb.db.execute(sql`update outbox set status = 'PENDING', handlers_done = '{}', leased_until = null where id = ${m.id}`);
    await w.worker.runOnce();
    expect(readdirSync(w.config.MAIL_DIR).sort()).toEqual(files);
    await w.close();
  });
});
