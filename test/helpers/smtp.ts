import type { AddressInfo, Server } from 'node:net';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMail {
  to: string[];
  parsed: ParsedMail;
}

export interface TestSmtpServer {
  /** SMTP_URL for the worker: plain SMTP, the client told not to try STARTTLS. */
  url: string;
  received: ReceivedMail[];
  /** The next `times` RCPT TO commands (for any recipient, or only `recipient`) are answered `code`. */
  reject(code: number, times: number, recipient?: string): void;
  close(): Promise<void>;
}

/**
 * A real SMTP server in the test process (the smtp-server package): no STARTTLS, no AUTH. Every
 * accepted message is parsed with mailparser. `reject` makes it answer RCPT TO with a 4xx or 5xx
 * reply, which nodemailer turns into an error carrying `responseCode`.
 */
export async function startSmtpServer(): Promise<TestSmtpServer> {
  const received: ReceivedMail[] = [];
  const rejections: { code: number; times: number; recipient?: string }[] = [];
  const server = new SMTPServer({
    disabledCommands: ['STARTTLS', 'AUTH'],
    authOptional: true,
    logger: false,
    onRcptTo(address, _session, callback) {
      const rule = rejections.find((r) => r.times > 0 && (!r.recipient || r.recipient === address.address));
      if (rule) {
        rule.times--;
        const err = new Error(rule.code >= 500 ? 'Mailbox unavailable' : 'Mailbox busy, try again later') as Error & {
          responseCode: number;
        };
        err.responseCode = rule.code;
        return callback(err);
      }
      callback();
    },
    onData(stream, session, callback) {
      simpleParser(stream).then(
        (parsed) => {
          received.push({ to: session.envelope.rcptTo.map((r) => r.address), parsed });
          callback();
        },
        (err) => callback(err),
      );
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = (server as unknown as { server: { address(): AddressInfo } }).server.address();
  return {
    url: `smtp://127.0.0.1:${port}?ignoreTLS=true`,
    received,
    reject(code, times, recipient) {
      rejections.push({ code, times, recipient });
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** An SMTP server that holds every message's DATA for `holdMs`: a handler in flight for that long. */
export async function slowSmtp(holdMs: number) {
  const accepted: number[] = [];
  let dataStarted = 0;
  const server = new SMTPServer({
    disabledCommands: ['STARTTLS', 'AUTH'],
    authOptional: true,
    logger: false,
    onData(stream, _session, callback) {
      dataStarted++;
      stream.resume();
      stream.on('end', () =>
        setTimeout(() => {
          accepted.push(Date.now());
          callback();
        }, holdMs),
      );
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = (server as unknown as { server: Server }).server.address() as AddressInfo;
  return {
    url: `smtp://127.0.0.1:${port}?ignoreTLS=true`,
    accepted,
    started: () => dataStarted,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
