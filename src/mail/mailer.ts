import { randomBytes } from 'node:crypto';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import nodemailer from 'nodemailer';
import type { Config } from '../config.ts';
import { inSpan, MESSAGING, SpanKind, tracingOn } from '../telemetry/tracing.ts';

/** One email, rendered and addressed. */
export interface OutgoingEmail {
  to: { name: string; address: string };
  subject: string;
  text: string;
  html: string;
  /**
   * Derived from the outbox message's idempotencyKey and the handler (see `emailMessageId`), so a
   * redelivered email carries the same Message-ID as the first one and is recognisable as a copy.
   */
  messageId: string;
  idempotencyKey: string;
}

export interface Mailer {
  /** 'smtp' when SMTP_URL is set, else 'file' (one .eml per email in MAIL_DIR). */
  readonly kind: 'smtp' | 'file';
  send(email: OutgoingEmail): Promise<void>;
  close(): void;
}

/** The domain of MAIL_FROM's address, used on the right of every Message-ID. */
function fromDomain(from: string): string {
  const m = /@([A-Za-z0-9.-]+)>?\s*$/.exec(from);
  return m?.[1] ?? 'stayhub.test';
}

/**
 * `<booking-created.<uuid>.email.guest-confirmation@stayhub.test>`: the same message and handler
 * always give the same id. Characters that are not safe in a Message-ID's left part (the ':' of
 * our idempotency keys, spaces…) become '.'.
 */
export function emailMessageId(idempotencyKey: string, handler: string, from = 'stayhub.test'): string {
  const local = `${idempotencyKey}.${handler}`.replace(/[^A-Za-z0-9._-]+/g, '.');
  return `<${local}@${fromDomain(from)}>`;
}

/** The file name the sink writes for a Message-ID: the same id, the same file. */
export function emlFileName(messageId: string): string {
  return `${messageId.replace(/^<|>$/g, '').replace(/[^A-Za-z0-9._@-]+/g, '_')}.eml`;
}

function toMailOptions(email: OutgoingEmail, from: string) {
  return {
    from,
    to: { name: email.to.name, address: email.to.address },
    subject: email.subject,
    text: email.text,
    html: email.html,
    messageId: email.messageId,
    headers: { 'X-Idempotency-Key': email.idempotencyKey },
  };
}

/**
 * SMTP_URL set: nodemailer's SMTP transport, every wait bounded by SMTP_TIMEOUT_MS so a hung server
 * becomes a timeout error (retried) rather than a handler that never returns. Options in the URL's
 * query string (e.g. `?ignoreTLS=true`) are passed to nodemailer.
 *
 * Unset: a file sink. nodemailer's stream transport builds the RFC 822 message exactly as SMTP would
 * have carried it, and it is written as `<Message-ID>.eml` in MAIL_DIR through a temporary file and
 * a rename, so a crash never leaves half an email and a redelivery overwrites the same file.
 */
export function createMailer(config: Pick<Config, 'SMTP_URL' | 'SMTP_TIMEOUT_MS' | 'MAIL_DIR' | 'MAIL_FROM'>): Mailer {
  const from = config.MAIL_FROM;
  if (config.SMTP_URL) {
    const t = config.SMTP_TIMEOUT_MS;
    const transport = nodemailer.createTransport({
      url: config.SMTP_URL,
      connectionTimeout: t,
      greetingTimeout: t,
      socketTimeout: t,
    });
    const server = new URL(config.SMTP_URL);
    const send = async (email: OutgoingEmail) => {
      await transport.sendMail(toMailOptions(email, from));
    };
    return {
      kind: 'smtp',
      send: (email) => (tracingOn() ? inSpan('send email', sendSpan(email, 'smtp', server.hostname), () => send(email)) : send(email)),
      close: () => transport.close(),
    };
  }

  const dir = path.resolve(config.MAIL_DIR);
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' });
  let made: Promise<unknown> | undefined;
  const send = async (email: OutgoingEmail) => {
    const info = await transport.sendMail(toMailOptions(email, from));
    await (made ??= mkdir(dir, { recursive: true }));
    const file = path.join(dir, emlFileName(email.messageId));
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    await writeFile(tmp, info.message as Buffer);
    await rename(tmp, file);
  };
  return {
    kind: 'file',
    send: (email) => (tracingOn() ? inSpan('send email', sendSpan(email, 'file', undefined), () => send(email)) : send(email)),
    close: () => transport.close(),
  };
}

/**
 * The email's span: nodemailer has no instrumentation, so it is written here, in the messaging
 * conventions' words (a message sent to a destination), with the Message-ID that finds it in a
 * mailbox. Never the address: a trace is no place for personal data.
 */
function sendSpan(email: OutgoingEmail, transport: 'smtp' | 'file', host: string | undefined) {
  return {
    kind: SpanKind.PRODUCER,
    attributes: {
      [MESSAGING.system]: transport === 'smtp' ? 'smtp' : 'stayhub_mail_file',
      [MESSAGING.operationType]: 'send',
      [MESSAGING.destination]: 'email',
      [MESSAGING.messageId]: email.messageId,
      ...(host && { 'server.address': host }),
    },
  };
}
