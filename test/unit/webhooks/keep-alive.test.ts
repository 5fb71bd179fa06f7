import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isGlobalAddress, type Network } from '../../../src/webhooks/address-policy.ts';
import { ConnectionPool } from '../../../src/webhooks/delivery/connections.ts';
import { sendOnce, type SendOptions } from '../../../src/webhooks/delivery/send.ts';

/*
 * Kept-alive webhook connections against real local receivers, with DNS played by the sender's
 * Network seam: a name whose answer the test changes between attempts, and a rule of public
 * addresses that counts the test's loopback receivers as public (nothing else changes: 10.0.0.0/8
 * and the rest stay refused).
 *
 * What each test guards: a pool at all (without one, 20 attempts make 20 connections); the check
 * of every attempt's DNS answer before any pooled socket is used (a pool whose sockets do their
 * own lookup sends over the old connection, 204); agents keyed by the checked addresses (an agent
 * per origin reuses the old socket, which the peer check then refuses).
 */

interface Receiver {
  port: number;
  /** Requests received, and connections opened, so far. */
  requests: number;
  connections: number;
  /** Connections open now. */
  open: Set<Socket>;
  close(): Promise<void>;
}

const receivers: Receiver[] = [];
const pools: ConnectionPool[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) p.close();
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

/** A receiver on `address` (and `port`, or a free one) that answers 204 and counts its connections. */
async function receiver(address = '127.0.0.1', port = 0): Promise<Receiver> {
  const r: Receiver = { port: 0, requests: 0, connections: 0, open: new Set(), close: async () => undefined };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      r.requests++;
      res.writeHead(204).end();
    });
  });
  server.on('connection', (socket: Socket) => {
    r.connections++;
    r.open.add(socket);
    socket.on('close', () => r.open.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(port, address, resolve));
  r.port = (server.address() as AddressInfo).port;
  r.close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  receivers.push(r);
  return r;
}

/** DNS for `hooks.example.test` answering whatever `answer` holds at each lookup; loopback receivers count as public. */
function playedDns(answer: { addresses: string[] }, publicLoopback: string[]): Network & { lookups: number } {
  const network = {
    lookups: 0,
    resolve: async (hostname: string) => {
      network.lookups++;
      if (hostname !== 'hooks.example.test') throw Object.assign(new Error(`${hostname} unknown`), { code: 'ENOTFOUND' });
      return answer.addresses.map((address) => ({ address, family: 4 }));
    },
    isPublic: (address: string) => publicLoopback.includes(address) || isGlobalAddress(address),
  };
  return network;
}

function pool(): ConnectionPool {
  const p = new ConnectionPool();
  pools.push(p);
  return p;
}

const send = (url: string, more: Partial<SendOptions>) =>
  sendOnce({ url, headers: {}, body: '{}', timeoutMs: 5_000, connectTimeoutMs: 2_000, allowPrivate: false, ...more });

describe('kept-alive webhook connections', () => {
  it('sends one attempt after another over one connection', async () => {
    const r = await receiver();
    const connections = pool();
    const network = playedDns({ addresses: ['127.0.0.1'] }, ['127.0.0.1']);
    for (let i = 0; i < 20; i++) {
      expect(await send(`http://hooks.example.test:${r.port}/hooks`, { connections, network })).toMatchObject({ status: 204, error: null });
    }
    expect(r.requests).toBe(20);
    expect(r.connections).toBe(1);
    // Each attempt resolved the name afresh all the same.
    expect(network.lookups).toBe(20);
  });

  it('refuses a private address the name now resolves to, though a kept-alive connection to its old address is open', async () => {
    const r = await receiver();
    const connections = pool();
    const answer = { addresses: ['127.0.0.1'] };
    const network = playedDns(answer, ['127.0.0.1']);
    const url = `http://hooks.example.test:${r.port}/hooks`;
    expect(await send(url, { connections, network })).toMatchObject({ status: 204 });
    expect(r.open.size).toBe(1); // the connection is kept, idle, ready for the next attempt

    answer.addresses = ['10.0.0.1'];
    const refused = await send(url, { connections, network });
    expect(refused).toMatchObject({
      status: null,
      error: expect.stringMatching(/resolves to 10\.0\.0\.1, which is not a public internet address/),
    });
    expect(r.requests).toBe(1); // nothing went over the open connection
  });

  it('notices a DNS answer that changes: the next attempt connects to the new address, the old connection is closed', async () => {
    const first = await receiver('127.0.0.1');
    const second = await receiver('127.0.0.2', first.port);
    const connections = pool();
    const answer = { addresses: ['127.0.0.1'] };
    const network = playedDns(answer, ['127.0.0.1', '127.0.0.2']);
    const url = `http://hooks.example.test:${first.port}/hooks`;
    expect(await send(url, { connections, network })).toMatchObject({ status: 204 });

    answer.addresses = ['127.0.0.2'];
    expect(await send(url, { connections, network })).toMatchObject({ status: 204 });
    expect([first.requests, second.requests]).toEqual([1, 1]);
    await expect.poll(() => first.open.size).toBe(0);
  });

  it('without the pool, opens a connection per attempt', async () => {
    const r = await receiver();
    const network = playedDns({ addresses: ['127.0.0.1'] }, ['127.0.0.1']);
    for (let i = 0; i < 3; i++) expect(await send(`http://hooks.example.test:${r.port}/hooks`, { network })).toMatchObject({ status: 204 });
    expect(r.connections).toBe(3);
  });
});
