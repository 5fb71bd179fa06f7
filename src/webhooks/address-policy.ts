import { lookup as dnsLookup } from 'node:dns/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/*
 * Server-side request forgery: a host types the URL, and our worker, inside our network, calls it.
 * Only globally routable addresses may be called. The check runs at registration (a clear 400) and
 * again at every delivery, where the address that was checked is the address connected to: the
 * lookup below is the socket's own, so a name that resolves to a public address for the check and
 * to 127.0.0.1 a moment later (DNS rebinding) cannot slip through.
 */

const NOT_GLOBAL = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata (169.254.169.254)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  NOT_GLOBAL.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard
  ['2001::', 23], // IETF protocol assignments (Teredo, ORCHID…)
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4: wraps an IPv4 address we would not check
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
] as const) {
  NOT_GLOBAL.addSubnet(net, prefix, 'ipv6');
}

/** An IPv6 address as its eight 16-bit groups; `a.b.c.d` in the last two groups and a zone id are allowed. */
function ipv6Groups(address: string): number[] {
  let text = address.split('%')[0]!.toLowerCase();
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const parse = (part: string | undefined) => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const left = parse(head);
  const right = parse(tail);
  return tail === undefined ? left : [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

/*
 * An IPv4 address carried inside an IPv6 one. Each of these prefixes ends at the IPv4 address in
 * its last 32 bits, whatever way it is spelt (`::ffff:127.0.0.1`, `::ffff:7f00:1`, `[::127.0.0.1]`
 * that the URL parser turns into `[::7f00:1]`), so the inner address decides:
 *   ::ffff:0:0/96      IPv4-mapped: the kernel connects to the IPv4 address itself.
 *   ::ffff:0:0:0/96    IPv4-translated (SIIT).
 *   64:ff9b::/96       NAT64, well-known prefix: a NAT64 gateway on our network would connect to the
 *                      inner address, and RFC 6052's rule that it must not translate to private
 *                      ones is the gateway's, not something we can count on.
 * `::a.b.c.d` (IPv4-compatible, ::/96) is deprecated (RFC 4291) and routed differently by each
 * stack: it is refused whatever it carries (returned as 0.0.0.0, which is not global).
 */
function embeddedIpv4(address: string): string | undefined {
  const g = ipv6Groups(address);
  if (g.length !== 8 || g.some((n) => !Number.isInteger(n))) return '0.0.0.0'; // unreadable: refuse
  const zeros = (from: number, to: number) => g.slice(from, to).every((n) => n === 0);
  const inner = () => [g[6]! >> 8, g[6]! & 255, g[7]! >> 8, g[7]! & 255].join('.');
  if (zeros(0, 5) && g[5] === 0xffff) return inner();
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) return inner();
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return inner();
  if (zeros(0, 6)) return '0.0.0.0'; // ::/96: IPv4-compatible, and :: and ::1 with it
  return undefined;
}

/** True for an address on the public internet; false for loopback, private, link-local, CGNAT, multicast, reserved. */
export function isGlobalAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !NOT_GLOBAL.check(address, 'ipv4');
  if (family === 6) {
    const inner = embeddedIpv4(address);
    if (inner) return isGlobalAddress(inner);
    return !NOT_GLOBAL.check(address.split('%')[0]!, 'ipv6');
  }
  return false;
}

/** The web's ports: 80, 443 and the unprivileged ones. Below 1024 lie SSH, SMTP and the like. */
export function isAllowedPort(url: URL, extraPorts: readonly number[] = []): boolean {
  const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
  return port === 80 || port === 443 || port >= 1024 || (port > 0 && extraPorts.includes(port));
}

export class AddressNotAllowedError extends Error {
  readonly code = 'webhook_address_not_allowed';
  constructor(message: string) {
    super(message);
    this.name = 'AddressNotAllowedError';
  }
}

/** `[::1]` → `::1`: URL keeps the brackets of an IPv6 host. */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

/** Every address of a name, in the resolver's order. */
export type Resolve = (hostname: string) => Promise<{ address: string; family: number }[]>;

/**
 * How a delivery finds and judges addresses: the system resolver and isGlobalAddress. Replaceable
 * (the sender's `network` dependency) so a test can play DNS answers that change, against a local
 * receiver whose address it counts as public.
 */
export interface Network {
  resolve: Resolve;
  isPublic: (address: string) => boolean;
}

export const SYSTEM_NETWORK: Network = {
  resolve: (hostname) => dnsLookup(hostname, { all: true, verbatim: true }),
  isPublic: isGlobalAddress,
};

/**
 * Resolves a URL's host and refuses it unless every address it has is global (one private address
 * among public ones is enough to refuse: which one a connection gets is not ours to choose).
 * Returns the addresses. With `allowPrivate` (WEBHOOK_ALLOW_PRIVATE_NETWORKS) nothing is refused.
 */
export async function checkDestination(url: URL, allowPrivate: boolean, network: Network = SYSTEM_NETWORK): Promise<string[]> {
  const host = hostOf(url);
  const addresses = isIP(host) ? [host] : (await network.resolve(host)).map((a) => a.address);
  if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: 'ENOTFOUND' });
  if (!allowPrivate) {
    const bad = addresses.find((a) => !network.isPublic(a));
    if (bad !== undefined) {
      throw new AddressNotAllowedError(
        bad === host ? `${host} is not a public internet address` : `${host} resolves to ${bad}, which is not a public internet address`,
      );
    }
  }
  return addresses;
}

/**
 * The socket's lookup for a delivery: resolves, refuses a name with any non-global address, and
 * hands the socket exactly the addresses it checked. (An IP literal never reaches a lookup: the
 * sender checks it before connecting.)
 */
export function checkedLookup(allowPrivate: boolean, network: Network = SYSTEM_NETWORK): LookupFunction {
  return (hostname, options, callback) => {
    network
      .resolve(hostname)
      .then((all) => {
        const found = options.family === 4 || options.family === 6 ? all.filter((a) => a.family === options.family) : all;
        if (!allowPrivate) {
          const bad = found.find((a) => !network.isPublic(a.address));
          if (bad) throw new AddressNotAllowedError(`${hostname} resolves to ${bad.address}, which is not a public internet address`);
        }
        if (found.length === 0) throw Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' });
        if (options.all) (callback as (e: null, a: { address: string; family: number }[]) => void)(null, found);
        else callback(null, found[0]!.address, found[0]!.family);
      })
      .catch((err: NodeJS.ErrnoException) => callback(err, '', 0));
  };
}
