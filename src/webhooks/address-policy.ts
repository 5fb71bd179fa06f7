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

/** An IPv4 address carried inside an IPv6 one (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::a.b.c.d): the inner one decides. */
function embeddedIpv4(address: string): string | undefined {
  const m = /^(?:::ffff:|::|64:ff9b::)(?:0:)?(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return m[1];
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (!hex) return undefined;
  const hi = parseInt(hex[1]!, 16);
  const lo = parseInt(hex[2]!, 16);
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
}

/** True for an address on the public internet; false for loopback, private, link-local, CGNAT, multicast, reserved. */
export function isGlobalAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !NOT_GLOBAL.check(address, 'ipv4');
  if (family === 6) {
    const inner = embeddedIpv4(address);
    if (inner) return isGlobalAddress(inner);
    return !NOT_GLOBAL.check(address, 'ipv6');
  }
  return false;
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

/**
 * Resolves a URL's host and refuses it unless every address it has is global (one private address
 * among public ones is enough to refuse: which one a connection gets is not ours to choose).
 * Returns the addresses. With `allowPrivate` (WEBHOOK_ALLOW_PRIVATE_NETWORKS) nothing is refused.
 */
export async function checkDestination(url: URL, allowPrivate: boolean): Promise<string[]> {
  const host = hostOf(url);
  const addresses = isIP(host) ? [host] : (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);
  if (!allowPrivate) {
    const bad = addresses.find((a) => !isGlobalAddress(a));
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
export function checkedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { all: true, verbatim: true, family: options.family })
      .then((found) => {
        if (!allowPrivate) {
          const bad = found.find((a) => !isGlobalAddress(a.address));
          if (bad) throw new AddressNotAllowedError(`${hostname} resolves to ${bad.address}, which is not a public internet address`);
        }
        if (found.length === 0) throw Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' });
        if (options.all) (callback as (e: null, a: { address: string; family: number }[]) => void)(null, found);
        else callback(null, found[0]!.address, found[0]!.family);
      })
      .catch((err: NodeJS.ErrnoException) => callback(err, '', 0));
  };
}
