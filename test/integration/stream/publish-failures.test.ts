import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { connect, errors as natsErrors } from '@nats-io/transport-node';
import { natsAway, refused } from '../../../src/events/publish-failures.ts';
import { skipWithoutNats, useNats } from '../../helpers/nats.ts';

/*
 * What a failed publish means to the relay's circuit (src/events/publish-failures.ts), for errors
 * produced for real: a reset socket and a request the connection dropped are NATS away (the message
 * waits without spending an attempt); a "no responders" answer is neither away nor a refusal (the
 * server is there and said nobody holds the subject: the publisher brings the stream back).
 * The JetStream answers (503, placement, limits) are in test/unit/publish-failures.test.ts.
 */

const skip = skipWithoutNats();
const nats = useNats(skip, { client: true });

/** The error a client gets from a peer that resets the connection: ECONNRESET from the kernel. */
async function connectionReset(): Promise<Error> {
  const server = net.createServer((socket) => socket.resetAndDestroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    return await new Promise<Error>((resolve) => {
      const client = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
      client.on('error', resolve);
      client.on('connect', () => client.write('PING\r\n'));
    });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

describe('a failed publish', () => {
  it('is NATS away when the connection was reset (ECONNRESET)', async () => {
    const err = await connectionReset();
    expect((err as NodeJS.ErrnoException).code).toBe('ECONNRESET');
    expect(natsAway(err)).toBe(true);
    expect(refused(err)).toBe(false);
  });
});

describe.skipIf(skip)('a failed publish, from a real nats-server', () => {
  it('is not NATS away when the server answered that nobody listens (no responders)', async () => {
    const err = await nats.nc.request(`nobody.listens.${Date.now()}`, '', { timeout: 5_000 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(natsErrors.RequestError);
    expect((err as InstanceType<typeof natsErrors.RequestError>).isNoResponders()).toBe(true);
    expect(natsAway(err)).toBe(false);
    expect(refused(err)).toBe(false);
  });

  it('is NATS away when the connection closed under a request (a request error that is not "no responders")', async () => {
    const subject = `never.answers.${Date.now()}`;
    const sub = nats.nc.subscribe(subject, { callback: () => {} });
    const nc = await connect({ servers: nats.url.replace('nats://', '') });
    try {
      await nats.nc.flush();
      const pending = nc.request(subject, '', { timeout: 30_000 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      await nc.close();
      const err = await pending;
      expect(err).toBeInstanceOf(natsErrors.RequestError);
      expect((err as InstanceType<typeof natsErrors.RequestError>).isNoResponders()).toBe(false);
      expect(natsAway(err)).toBe(true);
      expect(refused(err)).toBe(false);
    } finally {
      sub.unsubscribe();
      await nc.close().catch(() => undefined);
    }
  });
});
