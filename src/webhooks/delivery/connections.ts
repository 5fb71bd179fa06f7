import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction, type Socket } from 'node:net';

/*
 * Keep-alive connections for webhook deliveries, pooled per checked address.
 *
 * An attempt resolves its URL's host afresh and checks every address (address-policy.ts); only
 * then does it ask here for an agent, keyed by the URL's origin AND that set of checked addresses.
 * Every socket of an agent connects to those addresses and no other (its lookup answers them and
 * nothing else), so a pooled socket is always one whose address passed the check:
 *   - a DNS answer that changes gives another key, hence another agent and a new connection, and
 *     the origin's old agent is closed: a connection made to the old answer is never used again;
 *   - a DNS answer that changes to a refused address never reaches here: the attempt fails at the
 *     check, whatever connections exist.
 * As a last guard, send.ts compares the socket's remote address with the set before writing.
 *
 * No pipelining: one request per connection at a time (HTTP/1.1 keep-alive), several connections
 * per endpoint as the sender's slots allow (WEBHOOK_ENDPOINT_CONCURRENCY). Measured in
 * docs/adr/0036-webhook-keep-alive-per-checked-address.md.
 */

/** How long an idle connection is kept: under the 5 s most servers (Node's among them) keep one. A server's `Keep-Alive: timeout=` shortens it. */
export const IDLE_MS = 4_000;

/** Origins with agents kept at once; the least recently used one beyond is closed. */
const MAX_AGENTS = 512;

export interface CheckedAddress {
  address: string;
  family: 4 | 6;
}

/** A socket lookup that answers exactly the checked addresses, never asking DNS again. */
export function fixedLookup(addresses: readonly CheckedAddress[]): LookupFunction {
  return (_hostname, options, callback) => {
    const wanted = options.family === 4 || options.family === 6 ? addresses.filter((a) => a.family === options.family) : addresses;
    if (wanted.length === 0) {
      callback(Object.assign(new Error('no checked address of that family'), { code: 'ENOTFOUND' }), '', 0);
      return;
    }
    if (options.all) (callback as (e: null, a: CheckedAddress[]) => void)(null, [...wanted]);
    else callback(null, wanted[0]!.address, wanted[0]!.family);
  };
}

export const familyOf = (address: string): 4 | 6 => (isIP(address) === 6 ? 6 : 4);

/** True when a connected socket's peer is one of the checked addresses (IPv4-mapped spelling allowed). */
export function connectedToChecked(socket: Socket, addresses: readonly CheckedAddress[]): boolean {
  const remote = socket.remoteAddress?.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '');
  return remote !== undefined && addresses.some((a) => a.address === remote);
}

export class ConnectionPool {
  /** origin → { the key of its current address set, the agent }. Map order: least recently used first. */
  private readonly agents = new Map<string, { addressKey: string; agent: http.Agent }>();
  private closed = false;

  /**
   * The agent of `url`'s origin for `addresses` (checked by the caller). An origin whose checked
   * addresses changed gets a new agent and its old one is closed, connections and all.
   */
  agentFor(url: URL, addresses: readonly CheckedAddress[]): http.Agent {
    if (this.closed) throw new Error('the webhook connection pool is closed');
    const origin = `${url.protocol}//${url.host}`;
    const addressKey = addresses
      .map((a) => a.address)
      .sort()
      .join(',');
    const current = this.agents.get(origin);
    if (current) {
      this.agents.delete(origin);
      if (current.addressKey === addressKey) {
        this.agents.set(origin, current); // most recently used: to the end
        return current.agent;
      }
      current.agent.destroy();
    }
    const options = { keepAlive: true, timeout: IDLE_MS, scheduling: 'lifo' as const, lookup: fixedLookup(addresses) };
    const agent = url.protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
    this.agents.set(origin, { addressKey, agent });
    if (this.agents.size > MAX_AGENTS) {
      const [oldest, { agent: old }] = this.agents.entries().next().value!;
      this.agents.delete(oldest);
      old.destroy();
    }
    return agent;
  }

  /** Closes every idle connection of an agent (after a reused one was found dead: its siblings likely are too). */
  static dropIdle(agent: http.Agent): void {
    for (const sockets of Object.values(agent.freeSockets)) for (const s of sockets ?? []) s.destroy();
  }

  /** Closes every connection; later attempts fail (the sender is stopping). */
  close(): void {
    this.closed = true;
    for (const { agent } of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}
