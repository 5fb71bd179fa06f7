import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request a receiver got. */
export interface ReceivedWebhook {
  headers: http.IncomingHttpHeaders;
  body: string;
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
}

export interface WebhookReceiver {
  url: string;
  received: ReceivedWebhook[];
  /** Decides each answer; called with the number of the request (1 = first). Default: 204. */
  answer: (n: number, req: ReceivedWebhook) => Answer;
  close(): Promise<void>;
}

/** A real HTTP server on a free port of 127.0.0.1 that records what it is sent. */
export async function startWebhookReceiver(answer: WebhookReceiver['answer'] = () => ({ status: 204 })): Promise<WebhookReceiver> {
  const received: ReceivedWebhook[] = [];
  const hanging = new Set<http.ServerResponse>();
  const receiver: WebhookReceiver = { url: '', received, answer, close: async () => undefined };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const got = { headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      received.push(got);
      const a = receiver.answer(received.length, got);
      if (a.hang) {
        hanging.add(res);
        return;
      }
      setTimeout(() => {
        res.writeHead(a.status ?? 204, a.headers);
        res.end(a.body);
      }, a.delayMs ?? 0);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  receiver.close = async () => {
    for (const res of hanging) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return receiver;
}
