import type { Config } from '../../config.ts';
import { emailMessageId, type Mailer } from '../../mail/mailer.ts';
import * as templates from '../../mail/templates.ts';
import type { TopicHandler } from '../../messages/handler.ts';
import type { PayloadOf } from '../../messages/topics.ts';

/**
 * The booking emails. Each is its own handler so the worker records each one's success: if the
 * host's email fails after the guest's went out, the retry sends only the host's.
 *
 * At-least-once: a handler can send and then die before its success is recorded, and the email
 * goes again. The Message-ID (idempotencyKey + handler name) and X-Idempotency-Key header make
 * the copy recognisably the same email; the file sink even overwrites the same file.
 */

type Booking = PayloadOf<'booking.created'>;

function emailHandler<T extends 'booking.created' | 'booking.cancelled'>(
  deps: { mailer: Mailer; config: Pick<Config, 'MAIL_FROM'> },
  topic: T,
  name: string,
  recipient: 'guest' | 'host',
  render: (p: PayloadOf<T>) => templates.RenderedEmail,
): TopicHandler<T> {
  return {
    name,
    topic,
    async handle({ payload, log }) {
      const p = payload as Booking;
      const messageId = emailMessageId(p.idempotencyKey, name, deps.config.MAIL_FROM);
      await deps.mailer.send({
        to: recipient === 'guest' ? { name: p.guestName, address: p.guestEmail } : { name: p.hostName, address: p.hostEmail },
        ...render(payload),
        messageId,
        idempotencyKey: p.idempotencyKey,
      });
      // Debug: a line per email would cost a busy worker (src/outbox/runner/loop.ts, logEachMessage).
      if (log.isLevelEnabled('debug')) log.debug({ recipient, emailMessageId: messageId }, 'email sent');
    },
  };
}

export interface EmailHandlerDeps {
  mailer: Mailer;
  config: Pick<Config, 'MAIL_FROM'>;
}

export const guestConfirmation = (d: EmailHandlerDeps) =>
  emailHandler(d, 'booking.created', 'email.guest-confirmation', 'guest', templates.guestConfirmation);
export const hostNewBooking = (d: EmailHandlerDeps) =>
  emailHandler(d, 'booking.created', 'email.host-new-booking', 'host', templates.hostNewBooking);
export const guestCancellation = (d: EmailHandlerDeps) =>
  emailHandler(d, 'booking.cancelled', 'email.guest-cancellation', 'guest', templates.guestCancellation);
export const hostCancellation = (d: EmailHandlerDeps) =>
  emailHandler(d, 'booking.cancelled', 'email.host-cancellation', 'host', templates.hostCancellation);

/** A host's webhook endpoint was disabled by the system: the host learns why and how to resume. */
export const hostWebhookDisabled = (deps: EmailHandlerDeps): TopicHandler<'webhook.endpoint-disabled'> => ({
  name: 'email.host-webhook-disabled',
  topic: 'webhook.endpoint-disabled',
  async handle({ payload: p }) {
    await deps.mailer.send({
      to: { name: p.hostName, address: p.hostEmail },
      ...templates.hostWebhookDisabled(p),
      messageId: emailMessageId(p.idempotencyKey, 'email.host-webhook-disabled', deps.config.MAIL_FROM),
      idempotencyKey: p.idempotencyKey,
    });
  },
});
