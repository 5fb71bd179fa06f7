import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { checkDestination, checkedLookup, hostOf, isAllowedPort } from '../address-policy.ts';

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
}

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
 * - No connection reuse (agent: false): each attempt resolves and checks afresh.
 */
export async function sendOnce(opts: SendOptions): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const failed = (error: string): AttemptResult => ({ status: null, body: null, retryAfterSeconds: null, durationMs: elapsed(), error });

  let url: URL;
  try {
    url = new URL(opts.url);
    if (!isAllowedPort(url, opts.extraPorts)) return failed(`port ${url.port} is not allowed (WEBHOOK_EXTRA_PORTS)`);
    if (isIP(hostOf(url))) await checkDestination(url, opts.allowPrivate);
  } catch (err) {
    return failed((err as Error).message);
  }
  const client = url.protocol === 'https:' ? https : http;

  return new Promise<AttemptResult>((resolve) => {
    let settled = false;
    const finish = (r: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(total);
      clearTimeout(connect);
      opts.signal?.removeEventListener('abort', onAbort);
      req.destroy();
      resolve(r);
    };
    const req = client.request(url, {
      method: 'POST',
      agent: false,
      lookup: checkedLookup(opts.allowPrivate),
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(opts.body), ...opts.headers },
    });
    const total = setTimeout(() => finish(failed(`timed out after ${opts.timeoutMs} ms`)), opts.timeoutMs);
    const connect = setTimeout(() => finish(failed(`no connection within ${opts.connectTimeoutMs} ms`)), opts.connectTimeoutMs);
    const onAbort = () => finish(failed('the worker stopped during the attempt'));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('socket', (socket) => {
      socket.once(url.protocol === 'https:' ? 'secureConnect' : 'connect', () => clearTimeout(connect));
    });
    req.on('error', (err: NodeJS.ErrnoException) => finish(failed(err.code ? `${err.code}: ${err.message}` : err.message)));
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      const retryAfter = status === 429 || status === 503 ? parseRetryAfter(res.headers['retry-after']) : null;
      const chunks: Buffer[] = [];
      let kept = 0;
      const done = () => {
        const body = Buffer.concat(chunks).subarray(0, RESPONSE_BODY_KEEP).toString('utf8');
        finish({ status, body, retryAfterSeconds: retryAfter, durationMs: elapsed(), error: null });
      };
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        kept += chunk.length;
        if (kept >= RESPONSE_BODY_KEEP) done(); // enough to show; the status is what counts
      });
      res.on('end', done);
      res.on('error', done);
    });
    req.end(opts.body);
  });
}
