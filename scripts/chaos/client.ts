import { setTimeout as sleep } from 'node:timers/promises';
import { retryDelaySeconds } from '../../src/outbox/index.ts';

/*
 * The load generator's HTTP client: what a careful API client does when the server goes away.
 * A request that fails at the network level (connection refused or reset, a timeout), a 503, or a
 * 409 request_in_progress is sent again, identical, Idempotency-Key included, until it gets an
 * answer or its deadline passes. Every response status is counted; every 5xx is kept with its
 * route and body, because a 500 is an invariant violation.
 */

export interface ApiResponse<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

export class GaveUp extends Error {
  constructor(
    readonly route: string,
    readonly lastError: string,
  ) {
    super(`gave up on ${route}: ${lastError}`);
  }
}

export class ApiClient {
  /** `${route} ${status}` → count; network errors as status 'network'. */
  readonly counts = new Map<string, number>();
  readonly serverErrors: { at: number; method: string; route: string; status: number; body: string }[] = [];
  retries = 0;
  gaveUp = 0;
  requests = 0;
  private stopping = false;

  constructor(
    readonly baseUrl: string,
    private readonly requestTimeoutMs = 15_000,
  ) {}

  private count(route: string, status: number | string) {
    const k = `${route} ${status}`;
    this.counts.set(k, (this.counts.get(k) ?? 0) + 1);
  }

  /** After this, calls give up at their next retry instead of waiting out their deadline. */
  stop() {
    this.stopping = true;
  }

  /** `route` labels the figures ('POST /bookings'); the call gives up after `deadlineMs`. */
  async call<T = any>(
    method: string,
    path: string,
    opts: { body?: unknown; token?: string; idempotencyKey?: string; route?: string; deadlineMs?: number } = {},
  ): Promise<ApiResponse<T>> {
    const route = opts.route ?? `${method} ${path}`;
    const deadline = Date.now() + (opts.deadlineMs ?? 120_000);
    const headers: Record<string, string> = {};
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    if (opts.idempotencyKey) headers['idempotency-key'] = opts.idempotencyKey;
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);

    for (let attempt = 1; ; attempt++) {
      let lastError: string;
      this.requests++;
      try {
        const res = await fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.timeout(this.requestTimeoutMs),
        });
        const text = await res.text();
        this.count(route, res.status);
        let body: any = text;
        try {
          body = text ? JSON.parse(text) : null;
        } catch {
          /* not JSON: keep the text */
        }
        if (res.status >= 500) {
          if (res.status !== 503) this.serverErrors.push({ at: Date.now(), method, route, status: res.status, body: text.slice(0, 500) });
          lastError = `HTTP ${res.status}`;
        } else if (res.status === 409 && body?.code === 'request_in_progress') {
          lastError = 'request_in_progress';
        } else if (res.status === 429) {
          lastError = 'rate limited';
        } else {
          return { status: res.status, body, headers: res.headers };
        }
      } catch (err) {
        const cause = (err as { cause?: { code?: string } }).cause;
        lastError = cause?.code ?? (err as Error).name ?? String(err);
        this.count(route, 'network');
      }
      if (this.stopping || Date.now() > deadline) {
        this.gaveUp++;
        throw new GaveUp(route, lastError);
      }
      this.retries++;
      // Capped exponential pause with jitter, so clients do not hammer a restarting server together.
      await sleep(retryDelaySeconds(attempt + 1, { baseSeconds: 0.1, maxSeconds: 2, jitter: true }) * 1000);
    }
  }
}
