import { describe, expect, it } from 'vitest';
import { PermanentError } from '../../src/errors.ts';
import { emailMessageId, emlFileName } from '../../src/mail/mailer.ts';
import { escapeHtml, formatDate, formatMoney, guestConfirmation } from '../../src/mail/templates.ts';
import { describeFailure, isPermanent, NEUTRAL_FAILURE_RULES } from '../../src/outbox/testing.ts';
import { FAILURE_RULES, redactEmails } from '../../src/worker/failure-rules.ts';

const smtpError = (responseCode: number | undefined, code = 'EENVELOPE') =>
  Object.assign(new Error(`reply ${responseCode}`), { code, responseCode });

describe('failure classification', () => {
  it("the outbox's own rules: only PermanentError is permanent, and an error's text is kept as is", () => {
    expect(isPermanent(new PermanentError('no'), NEUTRAL_FAILURE_RULES)).toBe(true);
    expect(isPermanent(smtpError(550), NEUTRAL_FAILURE_RULES)).toBe(false);
    expect(isPermanent(new TypeError('x'))).toBe(false);
    expect(describeFailure('h', new Error('to anna@example.com'))).toBe('h: Error: to anna@example.com');
    expect(NEUTRAL_FAILURE_RULES.payloadErrorName).toBe('InvalidPayload');
  });

  it("the application's rules: PermanentError and SMTP 5xx are permanent; SMTP 4xx, timeouts, connection errors and bugs are not", () => {
    const isPermanentHere = (err: unknown) => isPermanent(err, FAILURE_RULES);
    expect(isPermanentHere(new PermanentError('no'))).toBe(true);
    expect(isPermanentHere(smtpError(550))).toBe(true);
    expect(isPermanentHere(smtpError(554))).toBe(true);
    expect(isPermanentHere(smtpError(451))).toBe(false);
    expect(isPermanentHere(smtpError(421))).toBe(false);
    expect(isPermanentHere(smtpError(undefined, 'ETIMEDOUT'))).toBe(false);
    expect(isPermanentHere(smtpError(undefined, 'ECONNECTION'))).toBe(false);
    expect(isPermanentHere(new TypeError('x is undefined'))).toBe(false);
    expect(isPermanentHere(null)).toBe(false);
  });

  it('describes a failure as "handler: ErrorClass: message", with email addresses removed', () => {
    expect(describeFailure('email.x', new PermanentError('gone'))).toBe('email.x: PermanentError: gone');
    expect(describeFailure('email.x', new TypeError('bad'))).toBe('email.x: TypeError: bad');
    expect(describeFailure('email.x', smtpError(550))).toBe('email.x: Error(EENVELOPE): reply 550');
    expect(describeFailure('h', 'a string')).toBe('h: Error: a string');
    expect(describeFailure('email.x', new Error('550 <anna@example.com> unknown'), FAILURE_RULES)).toBe(
      'email.x: Error: 550 <[email]> unknown',
    );
    expect(redactEmails('550 <anna.b+x@mail.example.com>: unknown; cc bob@ex.org')).toBe('550 <[email]>: unknown; cc [email]');
  });
});

describe('email building blocks', () => {
  it('derives a stable Message-ID and file name from the idempotency key and the handler', () => {
    const id = emailMessageId('booking-created:0b7c…9', 'email.guest-confirmation', 'StayHub <no-reply@stayhub.test>');
    expect(id).toBe('<booking-created.0b7c.9.email.guest-confirmation@stayhub.test>');
    expect(emailMessageId('booking-created:0b7c…9', 'email.guest-confirmation', 'StayHub <no-reply@stayhub.test>')).toBe(id);
    expect(emlFileName(id)).toBe('booking-created.0b7c.9.email.guest-confirmation@stayhub.test.eml');
    expect(emlFileName('<../../etc/passwd@x>')).not.toContain('/');
  });

  it("formats money in the currency's minor units, dates as calendar dates, and escapes HTML", () => {
    expect(formatMoney(123456, 'EUR')).toBe('€1,234.56');
    expect(formatMoney(54000, 'JPY')).toBe('JP¥54,000'); // en-GB: unambiguous outside Japan
    expect(formatMoney(5, 'USD')).toBe('US$0.05');
    expect(formatDate('2026-12-04')).toBe('Fri 4 Dec 2026');
    expect(escapeHtml(`<a href="x">'&'</a>`)).toBe('&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
  });

  it('renders a confirmation with title, dates, nights, total and booking id', () => {
    const mail = guestConfirmation({
      bookingId: '11111111-2222-3333-4444-555555555555',
      propertyId: '11111111-2222-3333-4444-666666666666',
      propertyTitle: 'Flat <3',
      guestEmail: 'g@example.test',
      guestName: 'Gina',
      hostEmail: 'h@example.test',
      hostName: 'Hal',
      checkIn: '2026-12-04',
      checkOut: '2026-12-05',
      guests: 1,
      nights: 1,
      total: 9900,
      currency: 'GBP',
      idempotencyKey: 'booking-created:1',
    });
    expect(mail.subject).toBe('Booking confirmed: Flat <3, Fri 4 Dec 2026 – Sat 5 Dec 2026');
    expect(mail.text).toContain('1 night for 1 guest');
    expect(mail.text).toContain('£99.00');
    expect(mail.text).toContain('11111111-2222-3333-4444-555555555555');
    expect(mail.html).toContain('Flat &lt;3');
    expect(mail.html).not.toContain('Flat <3');
  });
});
