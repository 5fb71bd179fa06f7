import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * A host's webhook endpoint as the tests, the bench and the chaos run need one: a real HTTP server
 * on 127.0.0.1 that records what it is sent and answers what its caller decides, request by
 * request: a status (headers, body), after a delay, or never (a receiver that hangs).
 */

/** One request a receiver got. */
export interface ReceivedWebhook {
  /** The request's path: one receiver can stand for several endpoints. */
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** When its body was in (ms since the epoch). */
  at: number;
}

/** What to answer: a status (and headers, body), after a delay; `hang` never answers. */
export interface Answer {
  status?: number;
  headers?: Record<string, string>;
  /** Bytes as they are: a Buffer can carry what no string would (invalid UTF-8). */
  body?: string | Buffer;
  delayMs?: number;
  hang?: boolean;
  /** Called once the answer is written: not when the connection was cut during the delay. */
  onSent?: () => void;
}

export interface WebhookReceiver {
  /** `origin` + `/hooks`: an endpoint's URL for a caller that needs one. */
  url: string;
  /** `http://127.0.0.1:<port>`. */
  origin: string;
  /** What came in, when `record` was not turned off. */
  received: ReceivedWebhook[];
  /** Decides each answer; called with the number of the request (1 = first). Default: 204. */
  answer: (n: number, req: ReceivedWebhook) => Answer;
  /** Requests whose body was in, recorded or not. */
  requests(): number;
  /** TCP connections accepted: kept-alive ones are counted once. */
  connections(): number;
  /** Requests held open by a `hang` answer. */
  hanging(): number;
  /** Resolves once `n` requests came in; rejects after `timeoutMs`. */
  waitForRequests(n: number, timeoutMs: number): Promise<void>;
  /** Cuts every open connection (hanging or delayed answers too) and stops listening. */
  close(): Promise<void>;
}

export interface ReceiverOptions {
  /** Default 0: a free port. A fixed one lets a receiver that was closed (down) come back. */
  port?: number;
  /** Default true. Off, it only counts: a bench run of many thousands holds no bodies. */
  record?: boolean;
}

export async function startWebhookReceiver(
  answer: WebhookReceiver['answer'] = () => ({ status: 204 }),
  opts: ReceiverOptions = {},
): Promise<WebhookReceiver> {
  let requests = 0;
  let connections = 0;
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer();
  const receiver: WebhookReceiver = {
    url: '',
    origin: '',
    received: [],
    answer,
    requests: () => requests,
    connections: () => connections,
    hanging: () => hanging.size,
    async waitForRequests(n, timeoutMs) {
      const until = Date.now() + timeoutMs;
      while (requests < n) {
        if (Date.now() > until) throw new Error(`webhook receiver: ${requests} of ${n} requests within ${timeoutMs} ms`);
        await sleep(20);
      }
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };

  async function reply(res: http.ServerResponse, a: Answer) {
    if (a.hang) {
      hanging.add(res);
      res.once('close', () => hanging.delete(res));
      return;
    }
    if (a.delayMs) await sleep(a.delayMs);
    if (res.destroyed) return;
    res.writeHead(a.status ?? 204, a.headers);
    res.end(a.body);
    a.onSent?.();
  }

  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const got = { path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      if (opts.record !== false) receiver.received.push(got);
      void reply(res, receiver.answer(++requests, got));
    });
  });
  server.on('connection', () => void connections++);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  receiver.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  receiver.url = `${receiver.origin}/hooks`;
  return receiver;
}
