import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

/*
 * The mail provider the tests, the bench and the chaos run talk to: a real SMTP server (the
 * `smtp-server` package) on 127.0.0.1, plain SMTP (no STARTTLS, no AUTH), so the worker's
 * nodemailer transport goes through a whole SMTP conversation. What it answers is the caller's:
 * `onRecipient` may refuse a recipient at RCPT TO, `onMessage` may refuse a message at the end of
 * its DATA or take its time; a refusal is a 4xx or 5xx reply, which nodemailer turns into an error
 * carrying `responseCode` (what the worker's retry rules read).
 */

/** A message as the sink got it: the envelope's recipients and the raw bytes of its DATA. */
export interface SmtpMessage {
  to: string[];
  raw: Buffer;
}

/** An SMTP reply: 4xx (transient) or 5xx (permanent) refuses; anything below 400 accepts. */
export interface SmtpReply {
  code: number;
  message?: string;
}

export interface SmtpSinkOptions {
  /** Default 0: a free port. A fixed one lets a sink killed on purpose come back where it was. */
  port?: number;
  /** The reply to RCPT TO; nothing accepts the recipient. */
  onRecipient?: (address: string) => SmtpReply | undefined;
  /**
   * The reply to a message once its DATA is in; nothing accepts it. It is called in the same tick
   * as the DATA ends, so what it does before its first `await` keeps the order messages came in.
   */
  onMessage?: (message: SmtpMessage) => SmtpReply | undefined | Promise<SmtpReply | undefined>;
  /** After listening: a client's dropped connection (a killed worker) is the provider's everyday. */
  onError?: (err: Error) => void;
}

export interface SmtpSink {
  /** SMTP_URL for the worker: plain SMTP, the client told not to try STARTTLS. */
  url: string;
  port: number;
  /** The messages accepted, in the order their 250 went out, each with when (ms since the epoch). */
  accepted: (SmtpMessage & { at: number })[];
  /** How many DATA commands began: a handler in flight shows here before its message is accepted. */
  dataStarted: () => number;
  /** Stops listening; resolves once the open sessions have ended (a pooled idle one can hold it). */
  close: () => Promise<void>;
}

const REFUSED = { 4: 'Mailbox busy, try again later', 5: 'Mailbox unavailable' } as const;

function smtpError(reply: SmtpReply): Error {
  const message = reply.message ?? (reply.code >= 500 ? REFUSED[5] : REFUSED[4]);
  return Object.assign(new Error(message), { responseCode: reply.code });
}

export async function startSmtpSink(opts: SmtpSinkOptions = {}): Promise<SmtpSink> {
  const accepted: SmtpSink['accepted'] = [];
  let dataStarted = 0;
  const server = new SMTPServer({
    disabledCommands: ['STARTTLS', 'AUTH'],
    authOptional: true,
    logger: false,
    // Advertised in EHLO as a provider does; our messages are a few kB.
    size: 1024 * 1024,
    onRcptTo(address, _session, callback) {
      const reply = opts.onRecipient?.(address.address);
      callback(reply && reply.code >= 400 ? smtpError(reply) : undefined);
    },
    onData(stream, session, callback) {
      dataStarted++;
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const message = { to: session.envelope.rcptTo.map((r) => r.address), raw: Buffer.concat(chunks) };
        new Promise<SmtpReply | undefined>((resolve) => resolve(opts.onMessage?.(message))).then(
          (reply) => {
            if (reply && reply.code >= 400) return callback(smtpError(reply));
            accepted.push({ ...message, at: Date.now() });
            callback(null, reply?.message);
          },
          (err: Error) => callback(err),
        );
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', opts.onError ?? (() => {}));
  const { port } = (server as unknown as { server: { address(): AddressInfo } }).server.address();
  return {
    url: `smtp://127.0.0.1:${port}?ignoreTLS=true`,
    port,
    accepted,
    dataStarted: () => dataStarted,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
