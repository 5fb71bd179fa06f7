import { appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { onParentGone } from '../../src/process/lifeline.ts';
import { startSmtpSink } from '../lib/smtp-sink.ts';
import { Rng } from './rng.ts';

/*
 * The chaos run's mail provider: the shared SMTP sink (scripts/lib/smtp-sink.ts) in its own
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

const sink = await startSmtpSink({
  port: opts.port,
  onRecipient(address) {
    if (!reject.has(address.toLowerCase())) return undefined;
    record({ kind: 'rejected', at: Date.now(), code: 550, messageId: null, to: [address] });
    return { code: 550, message: '5.1.1 Mailbox does not exist (chaos)' };
  },
  async onMessage({ to, raw: bytes }) {
    const raw = bytes.toString('utf8');
    const messageId = header(raw, 'Message-ID');
    const [lo, hi] = opts.latencyMs;
    await sleep(rng.between(lo, hi));
    if (rng.chance(opts.tempFailRate)) {
      record({ kind: 'rejected', at: Date.now(), code: 451, messageId, to });
      return { code: 451, message: '4.3.0 Try again later (chaos)' };
    }
    record({ kind: 'accepted', at: Date.now(), messageId, idempotencyKey: header(raw, 'X-Idempotency-Key'), to });
    return { code: 250, message: 'Queued (chaos sink)' };
  },
  onError: (err) => process.stderr.write(`smtp-sink: ${String(err)}\n`),
});
process.stdout.write(`smtp-sink listening on ${opts.port}\n`);
process.send?.({ ready: true });

// close() waits for open sessions to end: a worker's idle pooled connection would hold it open.
const stop = () => {
  void sink.close().then(() => process.exit(0));
  setTimeout(() => process.exit(0), 1_000).unref();
};
process.on('SIGTERM', stop);
// The chaos run gone (SIGKILLed, or its time limit hit it alone): stop as on SIGTERM.
onParentGone(stop, { name: 'smtp-sink' });
