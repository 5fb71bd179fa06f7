import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { spread } from './stats.ts';

/**
 * Commit → handler latency, the same way for every system: each sample is one message inserted
 * in its own transaction; the clock starts just before COMMIT is sent (the message cannot be seen
 * by any worker before that) and stops when the handler is entered (`arrived`). The next sample
 * waits until the handler ran plus a short pause, so the worker is idle (back to waiting on
 * LISTEN or its poll) every time a message arrives.
 */
export class LatencyProbe {
  private readonly started = new Map<number, bigint>();
  private readonly waiters = new Map<number, () => void>();
  readonly samples: number[] = [];

  /** Call first thing in the handler. Messages without a started clock (warm-up) are ignored. */
  arrived(id: number): void {
    const now = process.hrtime.bigint();
    const t0 = this.started.get(id);
    if (t0 === undefined) return;
    this.started.delete(id);
    this.samples.push(Number(now - t0) / 1e6);
    this.waiters.get(id)?.();
    this.waiters.delete(id);
  }

  async run(opts: {
    url: string;
    samples: number;
    /** Inserts message `id` on `client`, inside the open transaction. */
    insert: (client: pg.Client, id: number) => Promise<void>;
    /** What the producer sends right after COMMIT (our enqueue's wake-up); inside the clock. */
    afterCommit?: (client: pg.Client) => Promise<void>;
    /** Pause after each handled sample (default 10 ms); a function draws a new one each time. */
    pauseMs?: number | (() => number);
    timeoutMs?: number;
  }): Promise<{ p50: number; p99: number; max: number; mean: number }> {
    const client = new pg.Client({ connectionString: opts.url, application_name: 'bench-latency-producer' });
    await client.connect();
    try {
      for (let id = 0; id < opts.samples; id++) {
        await client.query('begin');
        await opts.insert(client, id);
        const handled = new Promise<void>((resolve) => this.waiters.set(id, resolve));
        this.started.set(id, process.hrtime.bigint());
        await client.query('commit');
        await opts.afterCommit?.(client);
        const timeout = opts.timeoutMs ?? 10_000;
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          handled,
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(`latency sample ${id} not handled within ${timeout} ms`)), timeout);
          }),
        ]).finally(() => clearTimeout(timer));
        await sleep(typeof opts.pauseMs === 'function' ? opts.pauseMs() : (opts.pauseMs ?? 10));
      }
    } finally {
      await client.end();
    }
    return spread(this.samples);
  }
}
