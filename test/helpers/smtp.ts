import { setTimeout as sleep } from 'node:timers/promises';
import { simpleParser, type ParsedMail } from 'mailparser';
import { startSmtpSink } from '../../scripts/lib/smtp-sink.ts';

/*
 * The tests' faces of the shared SMTP sink (scripts/lib/smtp-sink.ts): one that parses what it
 * accepts and refuses on demand, one that holds every message (a handler in flight).
 */

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

/** Every accepted message parsed with mailparser, before its 250 goes out. */
export async function startSmtpServer(): Promise<TestSmtpServer> {
  const received: ReceivedMail[] = [];
  const rejections: { code: number; times: number; recipient?: string }[] = [];
  const sink = await startSmtpSink({
    onRecipient(address) {
      const rule = rejections.find((r) => r.times > 0 && (!r.recipient || r.recipient === address));
      if (!rule) return undefined;
      rule.times--;
      return { code: rule.code };
    },
    async onMessage({ to, raw }) {
      received.push({ to, parsed: await simpleParser(raw) });
      return undefined;
    },
  });
  return {
    url: sink.url,
    received,
    reject(code, times, recipient) {
      rejections.push({ code, times, recipient });
    },
    close: sink.close,
  };
}

/** An SMTP server that holds every message's DATA for `holdMs`: a handler in flight for that long. */
export async function slowSmtp(holdMs: number) {
  const sink = await startSmtpSink({ onMessage: () => sleep(holdMs, undefined) });
  return {
    url: sink.url,
    /** When each message was accepted (ms since the epoch). */
    get accepted(): number[] {
      return sink.accepted.map((m) => m.at);
    },
    started: sink.dataStarted,
    close: sink.close,
  };
}
