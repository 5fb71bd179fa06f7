import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isGlobalAddress, type Network } from '../../../src/webhooks/address-policy.ts';
import { ConnectionPool, fixedLookup, type CheckedAddress } from '../../../src/webhooks/delivery/connections.ts';
import { sendOnce } from '../../../src/webhooks/delivery/send.ts';

/*
 * The last guard against DNS rebinding: before a request is written, the socket it goes out on
 * must be connected to an address checked for this attempt. The pool keys its agents by the checked
 * addresses, so with a correct pool the guard never refuses anything, and no other test reaches
 * it. Here pools that get it wrong hand the attempt a connection to an address nobody checked —
 * a new one, and a kept-alive one — and the guard alone stands between them and the request.
 */

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A receiver on 127.0.0.1 answering 204: the address the test's DNS stops giving out. */
async function receiver() {
  const r = { port: 0, requests: 0 };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      r.requests++;
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  r.port = (server.address() as AddressInfo).port;
  closers.push(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return r;
}

/** DNS answering `answer.address` for hooks.example.test; 127.0.0.1 and 127.0.0.2 count as public. */
function playedDns(answer: { address: string }): Network {
  return {
    resolve: async () => [{ address: answer.address, family: 4 }],
    isPublic: (a) => a === '127.0.0.1' || a === '127.0.0.2' || isGlobalAddress(a),
  };
}

/** A pool with one agent per origin whatever was checked: its sockets go where its first attempt's DNS answer said. */
class StuckPool extends ConnectionPool {
  private agent: http.Agent | undefined;
  override agentFor(_url: URL, addresses: readonly CheckedAddress[]): http.Agent {
    this.agent ??= new http.Agent({ keepAlive: true, lookup: fixedLookup([...addresses]) });
    return this.agent;
  }
  override close(): void {
    this.agent?.destroy();
  }
}

/** A pool whose agents connect to 127.0.0.1 whatever was checked. */
class MisdirectedPool extends ConnectionPool {
  readonly agent = new http.Agent({ keepAlive: true, lookup: fixedLookup([{ address: '127.0.0.1', family: 4 }]) });
  override agentFor(): http.Agent {
    return this.agent;
  }
  override close(): void {
    this.agent.destroy();
  }
}

const send = (port: number, connections: ConnectionPool, network: Network) =>
  sendOnce({
    url: `http://hooks.example.test:${port}/hooks`,
    headers: {},
    body: '{}',
    timeoutMs: 5_000,
    connectTimeoutMs: 2_000,
    allowPrivate: false,
    connections,
    network,
  });

describe('the address check on the socket actually connected', () => {
  it('refuses a new connection made to an address that was not checked', async () => {
    const r = await receiver();
    const pool = new MisdirectedPool();
    closers.push(() => pool.close());
    const result = await send(r.port, pool, playedDns({ address: '127.0.0.2' }));
    expect(result).toMatchObject({
      status: null,
      error: `connected to 127.0.0.1, which is not an address checked for hooks.example.test`,
    });
    expect(r.requests).toBe(0); // nothing was written
  });

  it('refuses a kept-alive connection to the address the name resolved to before it was rebound', async () => {
    const r = await receiver();
    const pool = new StuckPool();
    closers.push(() => pool.close());
    const answer = { address: '127.0.0.1' };
    expect(await send(r.port, pool, playedDns(answer))).toMatchObject({ status: 204, error: null });
    expect(r.requests).toBe(1);

    answer.address = '127.0.0.2'; // rebound: the idle connection to 127.0.0.1 is still in the agent
    const result = await send(r.port, pool, playedDns(answer));
    expect(result).toMatchObject({
      status: null,
      error: expect.stringMatching(/^connected to 127\.0\.0\.1, which is not an address checked/),
    });
    expect(r.requests).toBe(1);
  });
});
