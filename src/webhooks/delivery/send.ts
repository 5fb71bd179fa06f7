import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { checkDestination, checkedLookup, hostOf, isAllowedPort, SYSTEM_NETWORK, type Network } from '../address-policy.ts';
import { ConnectionPool, connectedToChecked, familyOf, fixedLookup, type CheckedAddress } from './connections.ts';
import { keptResponseHeaders, type KeptResponseHeaders } from './exchanged-headers.ts';

/** What one attempt learnt: the answer's status and the start of its body, or why there was none. */
export interface AttemptResult {
  status: number | null;
  /** The first RESPONSE_BODY_KEEP bytes of the answer, as text. */
  body: string | null;
  /** Retry-After of a 429 or 503, in seconds. */
  retryAfterSeconds: number | null;
  durationMs: number;
  /** Set when no answer came: timeout, refused connection, address not allowed, TLS failure. */
  error: string | null;
  /** The Standard Webhooks headers the request carried (set by the caller, which made them). */
  requestHeaders?: Record<string, string>;
  /** The answer's headers, bounded (exchanged-headers.ts); absent when no answer came. */
  responseHeaders?: KeptResponseHeaders;
}

export interface SendOptions {
  url: string;
  headers: Record<string, string>;
  body: string;
  timeoutMs: number;
  connectTimeoutMs: number;
  allowPrivate: boolean;
  /** WEBHOOK_EXTRA_PORTS: ports below 1024 allowed besides 80 and 443. */
  extraPorts?: readonly number[];
  signal?: AbortSignal;
  /**
   * Keep-alive connections, pooled per checked address (connections.ts). Without it (the sender
   * with WEBHOOK_KEEP_ALIVE=false), a new connection per attempt, resolved by its own socket.
   */
  connections?: ConnectionPool;
  /** The resolver and the rule of which addresses are public (default: the system's). */
  network?: Network;
}

/** How an attempt connects: a pooled agent for the addresses it checked, or a connection of its own. */
interface Route {
  agent: http.Agent | false;
  lookup: LookupFunction;
  /** The checked addresses a pooled socket must be connected to. */
  addresses?: CheckedAddress[];
}

/**
 * Errors of a kept-alive connection the server closed as we reused it (its idle timeout racing our
 * request): nothing came back, so the request is sent again once, on a new connection, with the
 * same webhook-id (a receiver that got the first one dedupes on it).
 */
const STALE_CONNECTION = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED']);

/** Kept for the host to read (docs: "the first 2 KB of the response body"); the rest is not read at all. */
export const RESPONSE_BODY_KEEP = 2048;

/** `Retry-After: <seconds>` or `Retry-After: <HTTP date>`, in seconds from now; null when absent or unreadable. */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - now) / 1000);
}

/**
 * One POST to a host's endpoint. Never throws: every outcome is an AttemptResult.
 * - No redirects: a 3xx is an answer like any other non-2xx (following one would let a public URL
 *   send us to a private address).
 * - The destination is checked (address-policy.ts) and the socket connects to the checked address.
 * - A connect timeout, a total timeout covering the whole exchange, and a body read only up to
 *   RESPONSE_BODY_KEEP bytes: a slow or endless answer costs this attempt its time limit, no more.
 * - With `connections`: the host is resolved afresh for every attempt and every address checked;
 *   the request goes through the keep-alive agent of exactly those addresses, whose sockets connect
 *   to them and no other; a pooled socket's peer is checked again before the request is written.
 *   Without: no connection reuse (agent: false), the socket's own lookup resolves and checks.
 */
export async function sendOnce(opts: SendOptions): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const failed = (error: string): AttemptResult => ({ status: null, body: null, retryAfterSeconds: null, durationMs: elapsed(), error });

  let url: URL;
  let route: Route;
  try {
    url = new URL(opts.url);
    if (!isAllowedPort(url, opts.extraPorts)) return failed(`port ${url.port} is not allowed (WEBHOOK_EXTRA_PORTS)`);
    route = await routeOf(url, opts);
  } catch (err) {
    return failed((err as Error).message);
  }
  const deadline = started + opts.timeoutMs;
  const first = await exchange(url, route, opts, deadline, failed, elapsed);
  if (first !== 'stale') return first;
  // A kept-alive connection the server had closed: its idle siblings likely are too.
  if (route.agent) ConnectionPool.dropIdle(route.agent);
  const second = await exchange(url, route, opts, deadline, failed, elapsed);
  return second === 'stale' ? failed('the connection was closed before an answer came') : second;
}

async function routeOf(url: URL, opts: SendOptions): Promise<Route> {
  const network = opts.network ?? SYSTEM_NETWORK;
  if (!opts.connections) {
    if (isIP(hostOf(url))) await checkDestination(url, opts.allowPrivate, network);
    return { agent: false, lookup: checkedLookup(opts.allowPrivate, network) };
  }
  const addresses = (await checkDestination(url, opts.allowPrivate, network)).map((address) => ({ address, family: familyOf(address) }));
  return { agent: opts.connections.agentFor(url, addresses), lookup: fixedLookup(addresses), addresses };
}

/** One request on `route`; 'stale' when a reused connection turned out closed before anything came back. */
function exchange(
  url: URL,
  route: Route,
  opts: SendOptions,
  deadline: number,
  failed: (error: string) => AttemptResult,
  elapsed: () => number,
): Promise<AttemptResult | 'stale'> {
  const client = url.protocol === 'https:' ? https : http;

  return new Promise<AttemptResult | 'stale'>((resolve) => {
    let settled = false;
    let answered = false;
    /** `keep`: the answer was read to its end, the connection may serve the next attempt. */
    const finish = (r: AttemptResult | 'stale', keep = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(total);
      clearTimeout(connect);
      opts.signal?.removeEventListener('abort', onAbort);
      if (!keep) req.destroy();
      resolve(r);
    };
    const req = client.request(url, {
      method: 'POST',
      agent: route.agent,
      lookup: route.lookup,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(opts.body), ...opts.headers },
    });
    const timeoutMs = Math.max(0, deadline - performance.now());
    const total = setTimeout(() => finish(failed(`timed out after ${opts.timeoutMs} ms`)), timeoutMs);
    const connect = setTimeout(
      () => finish(failed(`no connection within ${opts.connectTimeoutMs} ms`)),
      Math.min(opts.connectTimeoutMs, timeoutMs),
    );
    const onAbort = () => finish(failed('the worker stopped during the attempt'));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('socket', (socket) => {
      const connected = () => {
        clearTimeout(connect);
        // The address check holds for the socket actually used, a pooled one included.
        if (route.addresses && !connectedToChecked(socket, route.addresses)) {
          finish(
            failed(`connected to ${socket.remoteAddress ?? 'an unknown address'}, which is not an address checked for ${url.hostname}`),
          );
        }
      };
      if (socket.connecting) socket.once(url.protocol === 'https:' ? 'secureConnect' : 'connect', connected);
      else connected(); // a kept-alive connection
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (req.reusedSocket && !answered && err.code && STALE_CONNECTION.has(err.code)) finish('stale');
      else finish(failed(err.code ? `${err.code}: ${err.message}` : err.message));
    });
    req.on('response', (res) => {
      answered = true;
      const status = res.statusCode ?? 0;
      const retryAfter = status === 429 || status === 503 ? parseRetryAfter(res.headers['retry-after']) : null;
      const responseHeaders = keptResponseHeaders(res.rawHeaders);
      const chunks: Buffer[] = [];
      let kept = 0;
      const done = (keep: boolean) => {
        const body = Buffer.concat(chunks).subarray(0, RESPONSE_BODY_KEEP).toString('utf8');
        finish({ status, body, retryAfterSeconds: retryAfter, durationMs: elapsed(), error: null, responseHeaders }, keep);
      };
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        kept += chunk.length;
        if (kept >= RESPONSE_BODY_KEEP) done(false); // enough to show; the status is what counts; the rest is not read
      });
      res.on('end', () => done(true));
      res.on('error', () => done(false));
    });
    req.end(opts.body);
  });
}
