import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions, preParsingHookHandler } from 'fastify';
import { Counter, type Registry } from 'prom-client';
import type { Config } from '../config.ts';
import { problem, sendProblem } from './problem.ts';

/*
 * Clients that stall. Fastify's defaults time nothing out (requestTimeout and connectionTimeout
 * 0), so a socket that sent the headers of a POST and then nothing held its place for as long as
 * its client liked; 46 of them, counted as requests in flight, had load shedding refuse every
 * request of everyone (ADR 0041). Three things now bound what a slow client can hold:
 *
 *   - timeouts: the headers within HTTP_HEADERS_TIMEOUT_MS, the whole request within
 *     HTTP_REQUEST_TIMEOUT_MS, or Node answers 408 and closes the socket; an idle keep-alive
 *     connection goes after HTTP_KEEP_ALIVE_TIMEOUT_MS;
 *   - admission control counts a request in flight only once its body is in (load-shedding.ts);
 *   - one client address may have at most HTTP_MAX_UPLOADS_PER_ADDRESS requests whose body is
 *     still arriving; past it, 429 and the socket closed (below).
 */

/**
 * How often Node looks for requests past their timeouts (it checks on an interval, 30 s by
 * default, so a 10 s timeout could run to 40 s): a quarter of the headers' timeout, within 0.1–1 s.
 */
const checkEveryMs = (headersTimeoutMs: number) => Math.min(1000, Math.max(100, Math.floor(headersTimeoutMs / 4)));

/** The timeouts, as Fastify's options (Fastify sets requestTimeout and keepAliveTimeout on the server over `http`'s). */
export function slowClientTimeouts(config: Config): Pick<FastifyServerOptions, 'requestTimeout' | 'keepAliveTimeout'> & {
  http: { headersTimeout: number; connectionsCheckingInterval: number };
} {
  return {
    requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
    keepAliveTimeout: config.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    http: {
      headersTimeout: config.HTTP_HEADERS_TIMEOUT_MS,
      connectionsCheckingInterval: checkEveryMs(config.HTTP_HEADERS_TIMEOUT_MS),
    },
  };
}

type RequestPayload = Parameters<preParsingHookHandler>[2];
type PreParsingDone = Parameters<preParsingHookHandler>[3];

const TOO_MANY_UPLOADS = 'Too many requests from this address are still sending their body';

/**
 * The cap on uploads per address, and a counter of the clients cut off. An upload is counted from
 * when its body is read (preParsing) until it is in (preValidation) or its socket is gone. Behind a
 * proxy (TRUST_PROXY) the address is the client's from X-Forwarded-For, as `request.ip` says.
 * A request refused by load shedding (its answer held back a second) never gets that far.
 */
export function registerSlowClientGuards(app: FastifyInstance, opts: { config: Config; registry: Registry }): void {
  const cap = opts.config.HTTP_MAX_UPLOADS_PER_ADDRESS;
  const cutOff = new Counter({
    name: 'stayhub_http_slow_clients_total',
    help: 'Clients cut off for being slow: timeout (headers or body not in within their timeout: 408, socket closed), uploads (too many bodies still arriving from one address: 429, socket closed).',
    labelNames: ['reason'] as const,
    registers: [opts.registry],
  });
  cutOff.inc({ reason: 'timeout' }, 0);
  cutOff.inc({ reason: 'uploads' }, 0);
  // Fastify's own listener answers the 408 and closes the socket; this one only counts.
  app.server.on('clientError', (err: NodeJS.ErrnoException) => {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') cutOff.inc({ reason: 'timeout' });
  });
  if (cap === 0) return;

  const uploads = new Map<string, number>();
  const ended = Symbol('upload ended');
  type Tracked = FastifyRequest & { [ended]?: () => void };
  const end = (request: Tracked) => {
    request[ended]?.();
    request[ended] = undefined;
  };

  // Callback hooks, not async ones: they run on every request. From preParsing, after the onRequest
  // hooks: a request waiting there (for its session, under load) is not waiting for its client.
  app.addHook('preParsing', (request: Tracked, reply: FastifyReply, payload: RequestPayload, done: PreParsingDone) => {
    // A client gone while the onRequest hooks ran (waiting for its session, under load): its
    // 'close' has come and gone, and a count taken now would never be given back.
    if (reply.raw.destroyed || request.raw.socket.destroyed) return done(null, payload);
    const ip = request.ip;
    const n = (uploads.get(ip) ?? 0) + 1;
    if (n > cap) {
      cutOff.inc({ reason: 'uploads' });
      // Closed rather than kept alive: its body, if any ever comes, is not worth reading.
      reply.header('connection', 'close').header('retry-after', String(opts.config.LOAD_SHED_RETRY_AFTER_SECONDS));
      void sendProblem(reply, problem('rate_limited', TOO_MANY_UPLOADS));
      return;
    }
    uploads.set(ip, n);
    let open = true;
    const release = () => {
      if (!open) return;
      open = false;
      const left = (uploads.get(ip) ?? 1) - 1;
      if (left > 0) uploads.set(ip, left);
      else uploads.delete(ip);
    };
    request[ended] = release;
    // 'close' comes once the answer is sent or the socket is gone (a 408 included), whichever first.
    reply.raw.once('close', release);
    done(null, payload);
  });
  app.addHook('preValidation', (request: Tracked, _reply: FastifyReply, done: () => void) => {
    end(request);
    done();
  });
}
