/*
 * NATS_URL: one server or a cluster's, comma-separated:
 *   nats://[user:password@]host[:port][,nats://[user:password@]host[:port]…]
 * (tls:// instead of nats:// to require TLS). Parsed here without the NATS client, so
 * src/config.ts can refuse a bad list at start with the rest of the configuration.
 *
 * The user and password (percent-encoded in the URL when they hold reserved characters) are sent
 * to the server; they never appear in a log line or an error message of ours (describeNatsServers).
 * One process signs in as one user, so every URL that carries credentials must carry the same
 * ones; writing them on the first URL only is enough. Every URL takes one scheme: a cluster where
 * some nodes require TLS and others do not would send the password in plain text to those.
 */

export interface NatsServers {
  /** host:port of each server, in the order given: the client tries them in random order. */
  servers: string[];
  user?: string;
  pass?: string;
  /** tls:// on every URL: a server that does not offer TLS is refused. */
  tls: boolean;
}

const SCHEMES: Readonly<Record<string, { tls: boolean }>> = { 'nats:': { tls: false }, 'tls:': { tls: true } };

/** The URLs of a NATS_URL value: split at commas, blanks around them dropped. */
const parts = (value: string) =>
  value
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');

/** host:port, IPv6 hosts in brackets (URL.hostname keeps them). */
const hostPort = (u: URL) => `${u.hostname}:${u.port || 4222}`;

/**
 * The servers, credentials and TLS requirement a NATS_URL stands for; throws an Error whose
 * message names what is wrong without repeating a password.
 */
export function parseNatsServers(value: string): NatsServers {
  const urls = parts(value);
  if (urls.length === 0) throw new Error('no server: expected nats://host:port, or several separated by commas');
  let scheme: { tls: boolean; name: string } | undefined;
  let credentials: { user: string; pass?: string } | undefined;
  const servers: string[] = [];
  urls.forEach((raw, i) => {
    const which = urls.length > 1 ? `server ${i + 1} of ${urls.length}: ` : '';
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      // The raw text may hold a password: say where, not what.
      throw new Error(`${which}not a URL (expected nats://host:port or tls://host:port)`);
    }
    const s = SCHEMES[u.protocol];
    if (!s) throw new Error(`${which}must start with nats:// or tls:// (it starts with ${u.protocol}//)`);
    if (!u.hostname) throw new Error(`${which}has no host`);
    if ((u.pathname !== '' && u.pathname !== '/') || u.search || u.hash) {
      throw new Error(`${which}${hostPort(u)} has a path or query; a NATS URL is scheme://[user:password@]host[:port]`);
    }
    if (scheme && scheme.tls !== s.tls) {
      throw new Error(
        `${which}${hostPort(u)} is ${u.protocol}// but an earlier server is ${scheme.name}//: use one scheme for every server`,
      );
    }
    scheme ??= { ...s, name: u.protocol };
    if (u.username) {
      const mine = { user: decodeURIComponent(u.username), ...(u.password ? { pass: decodeURIComponent(u.password) } : {}) };
      if (credentials && (credentials.user !== mine.user || credentials.pass !== mine.pass)) {
        throw new Error(`${which}${hostPort(u)} carries other credentials than an earlier server: one process signs in as one user`);
      }
      credentials = mine;
    }
    servers.push(hostPort(u));
  });
  return { servers, ...(credentials ?? {}), tls: scheme!.tls };
}

/** Where a NATS_URL points, for logs and errors: host:port of each server, never a credential. */
export function describeNatsServers(value: string): string {
  try {
    return parseNatsServers(value).servers.join(',');
  } catch {
    return '(unparseable NATS_URL)';
  }
}
