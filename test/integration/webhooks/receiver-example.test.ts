import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendOnce } from '../../../src/webhooks/delivery/send.ts';
import { newSecret, signatureHeader } from '../../../src/webhooks/secret.ts';

/*
 * examples/webhook-receiver.mjs, the receiver the "on one machine" recipe has a person run
 * (docs/webhooks.md): started as the recipe starts it, sent requests by the worker's own sending
 * code and signer. It must accept what StayHub signs and refuse what it did not.
 */

const root = path.resolve(import.meta.dirname, '../../..');
const secret = newSecret();
let receiver: ChildProcess;
let url = '';
const printed: string[] = [];

/** Resolves with the first printed line after `from` that matches. */
function lineAfter(from: number, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const look = () => {
      const hit = printed.slice(from).find((l) => pattern.test(l));
      if (hit !== undefined) return resolve(hit);
      if (receiver.exitCode !== null) return reject(new Error(`the receiver exited: ${printed.join('\n')}`));
      setTimeout(look, 20);
    };
    look();
  });
}

beforeAll(async () => {
  receiver = spawn(process.execPath, ['examples/webhook-receiver.mjs', '0'], {
    cwd: root,
    env: { ...process.env, STAYHUB_WEBHOOK_SECRET: secret },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let rest = '';
  receiver.stdout!.on('data', (chunk: Buffer) => {
    const lines = (rest + chunk.toString('utf8')).split('\n');
    rest = lines.pop()!;
    printed.push(...lines);
  });
  const listening = await lineAfter(0, /^receiving StayHub webhooks on /);
  url = /(http:\/\/127\.0\.0\.1:\d+\/)/.exec(listening)![1]! + 'stayhub';
});

afterAll(() => {
  receiver?.kill();
});

/** One POST as the webhook sender makes it: its headers, signed with `secrets`. */
function send(body: string, opts: { secrets?: string[]; id?: string; timestamp?: number } = {}) {
  const id = opts.id ?? randomUUID();
  const timestamp = opts.timestamp ?? Math.floor(Date.now() / 1000);
  return sendOnce({
    url,
    headers: {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signatureHeader(opts.secrets ?? [secret], id, timestamp, body),
    },
    body,
    timeoutMs: 5000,
    connectTimeoutMs: 5000,
    allowPrivate: true, // the setting the recipe turns on: the receiver is on loopback
  });
}

const event = (bookingId: string) =>
  JSON.stringify({ type: 'booking.created', eventId: randomUUID(), occurredAt: new Date().toISOString(), version: 1, data: { bookingId } });

describe('examples/webhook-receiver.mjs', () => {
  it('accepts and prints an event StayHub signed, once per webhook-id', async () => {
    const bookingId = randomUUID();
    const id = randomUUID();
    const from = printed.length;
    expect((await send(event(bookingId), { id })).status).toBe(204);
    expect(await lineAfter(from, /^booking\.created/)).toBe(`booking.created booking ${bookingId}, signature verified (${id})`);
    const again = printed.length;
    expect((await send(event(bookingId), { id })).status).toBe(204);
    expect(await lineAfter(again, /^duplicate/)).toBe(`duplicate ${id}: already handled`);
  });

  it('accepts a request during a rotation, when one of its two signatures is ours', async () => {
    expect((await send(event(randomUUID()), { secrets: [newSecret(), secret] })).status).toBe(204);
  });

  it('refuses, with a 401, another secret, an altered body and a stale timestamp', async () => {
    const from = printed.length;
    expect((await send(event(randomUUID()), { secrets: [newSecret()] })).status).toBe(401);
    expect((await send(event(randomUUID()), { timestamp: Math.floor(Date.now() / 1000) - 600 })).status).toBe(401);
    const id = randomUUID();
    const timestamp = Math.floor(Date.now() / 1000);
    const signed = event(randomUUID());
    const altered = await sendOnce({
      url,
      headers: {
        'webhook-id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatureHeader([secret], id, timestamp, signed),
      },
      body: signed.replace('booking.created', 'booking.cancelled'),
      timeoutMs: 5000,
      connectTimeoutMs: 5000,
      allowPrivate: true,
    });
    expect(altered.status).toBe(401);
    await lineAfter(from, new RegExp(`^refused ${id}`));
    expect(printed.slice(from).filter((l) => l.startsWith('refused '))).toHaveLength(3);
  });
});
