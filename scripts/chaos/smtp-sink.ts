import { appendFileSync } from 'node:fs';
import { SMTPServer } from 'smtp-server';
import { onParentGone } from '../../src/process/lifeline.ts';
import { Rng } from './rng.ts';

/*
 * The chaos run's mail provider: a real SMTP server (the `smtp-server` package) in its own
 * process, so the run can SIGKILL it and start it again on the same port.
 *
 * Every accepted message is appended to a JSON-lines file BEFORE the 250 reply: "recorded" means
 * "the provider has it". If this process is killed between the append and the reply, the worker
 * sees a dropped connection and sends again: a duplicate, which the checks count.
 *
 * Misbehaviour on demand (argv[2], JSON):
 * - tempFailRate: share of messages answered 451 at the end of DATA (transient: must be retried);
 * - rejectRecipients: addresses answered 550 at RCPT TO (permanent: the message must go DEAD);
 * - latencyMs: [min, max] pause before answering DATA, so workers are mid-handler when killed.
 * Each rejection is appended to the same file as a record of kind 'rejected'.
 */

export interface SinkOptions {
  port: number;
  recordFile: string;
  seed: number;
  tempFailRate: number;
  rejectRecipients: string[];
  latencyMs: [number, number];
}

export type SinkRecord =
  | { kind: 'accepted'; at: number; messageId: string | null; idempotencyKey: string | null; to: string[] }
  | { kind: 'rejected'; at: number; code: 451 | 550; messageId: string | null; to: string[] };

const opts = JSON.parse(process.argv[2] ?? '{}') as SinkOptions;
const rng = new Rng(opts.seed);
const reject = new Set(opts.rejectRecipients.map((a) => a.toLowerCase()));
const record = (r: SinkRecord) => appendFileSync(opts.recordFile, `${JSON.stringify(r)}\n`);

function header(raw: string, name: string): string | null {
  // Unfold first: a long Message-ID is written on a continuation line (RFC 5322 folding).
  const head = (raw.split(/\r?\n\r?\n/, 1)[0] ?? '').replace(/\r?\n[ \t]+/g, ' ');
  const m = new RegExp(`^${name}:[ \\t]*(.+)$`, 'im').exec(head);
  return m ? m[1]!.trim() : null;
}

function smtpError(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

const server = new SMTPServer({
  secure: false,
  authOptional: true,
  disabledCommands: ['AUTH', 'STARTTLS'],
  logger: false,
  size: 1024 * 1024,
  onRcptTo(address, _conn, callback) {
    if (reject.has(address.address.toLowerCase())) {
      record({ kind: 'rejected', at: Date.now(), code: 550, messageId: null, to: [address.address] });
      return callback(smtpError(550, '5.1.1 Mailbox does not exist (chaos)'));
    }
    callback();
  },
  onData(stream, conn, callback) {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const messageId = header(raw, 'Message-ID');
      const to = conn.envelope.rcptTo.map((r) => r.address);
      const [lo, hi] = opts.latencyMs;
      setTimeout(
        () => {
          if (rng.chance(opts.tempFailRate)) {
            record({ kind: 'rejected', at: Date.now(), code: 451, messageId, to });
            return callback(smtpError(451, '4.3.0 Try again later (chaos)'));
          }
          record({ kind: 'accepted', at: Date.now(), messageId, idempotencyKey: header(raw, 'X-Idempotency-Key'), to });
          callback(null, 'Queued (chaos sink)');
        },
        rng.between(lo, hi),
      );
    });
  },
});

server.on('error', (err) => process.stderr.write(`smtp-sink: ${String(err)}\n`));
server.listen(opts.port, '127.0.0.1', () => {
  process.stdout.write(`smtp-sink listening on ${opts.port}\n`);
  process.send?.({ ready: true });
});
// close() waits for open sessions to end: a worker's idle pooled connection would hold it open.
const stop = () => {
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1_000).unref();
};
process.on('SIGTERM', stop);
// The chaos run gone (SIGKILLed, or its time limit hit it alone): stop as on SIGTERM.
onParentGone(stop, { name: 'smtp-sink' });
