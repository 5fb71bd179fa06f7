import type pg from 'pg';
import type { EmbeddedPostgres } from '../../src/db/embedded.ts';
import type { Supervised } from './processes.ts';
import type { Rng } from './rng.ts';

/*
 * The fault schedule, drawn from the seed before the load starts (so the same --seed gives the
 * same faults at the same offsets), and the injector that carries it out against the running
 * processes. Faults may overlap: a worker may be killed while Postgres restarts; real outages do
 * not take turns either.
 */

export type FaultKind = 'worker-kill' | 'api-kill' | 'smtp-outage' | 'pg-restart' | 'pg-terminate-workers';

export interface PlannedFault {
  kind: FaultKind;
  /** Offset from the start of the load, ms. */
  at: number;
  /** How long the victim stays down (kills, outages, the restart's pause), ms. */
  downMs: number;
  /** Which worker (worker-kill). */
  target?: number;
}

export interface InjectedFault extends PlannedFault {
  startedAt: number;
  endedAt: number;
  detail: string;
}

export interface ScheduleOptions {
  durationMs: number;
  workers: number;
  /** The longest an SMTP outage may last and still be shorter than the retry window. */
  maxSmtpOutageMs: number;
}

/**
 * Faults fall between 8% and 75% of the load, so the run also shows the system settling after the
 * last one. Counts scale with the duration; a one-minute run still gets every kind.
 */
export function planFaults(rng: Rng, o: ScheduleOptions): PlannedFault[] {
  const d = o.durationMs;
  const when = (from = 0.08, to = 0.75) => Math.round(rng.between(from * d, to * d));
  const seconds = d / 1000;
  const plan: PlannedFault[] = [];
  for (let i = 0; i < Math.max(4, Math.round(seconds / 15)); i++) {
    plan.push({ kind: 'worker-kill', at: when(), downMs: rng.int(300, 3_000), target: rng.int(0, o.workers - 1) });
  }
  for (let i = 0; i < Math.max(1, Math.round(seconds / 90)); i++) {
    plan.push({ kind: 'api-kill', at: when(), downMs: rng.int(200, 2_000) });
  }
  for (let i = 0; i < Math.max(1, Math.round(seconds / 120)); i++) {
    plan.push({ kind: 'smtp-outage', at: when(), downMs: rng.int(1_000, Math.max(1_000, o.maxSmtpOutageMs)) });
  }
  plan.push({ kind: 'pg-restart', at: when(0.3, 0.6), downMs: rng.int(0, 1_500) });
  for (let i = 0; i < Math.max(2, Math.round(seconds / 30)); i++) {
    plan.push({ kind: 'pg-terminate-workers', at: when(), downMs: 0 });
  }
  return plan.sort((a, b) => a.at - b.at);
}

export interface InjectorDeps {
  workers: Supervised[];
  api: Supervised;
  smtp: Supervised;
  postgres: EmbeddedPostgres;
  admin: pg.Pool;
  /** When each worker last reported a handler outcome (ms epoch): "busy" means recently. */
  lastWorkerActivity: number[];
  /** Resolves once the process answers again (API: /health; SMTP: its port). */
  waitApiUp(): Promise<void>;
  waitSmtpUp(): Promise<void>;
  log(line: string): void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class FaultInjector {
  readonly done: InjectedFault[] = [];
  private running = new Set<Promise<void>>();
  private timers: NodeJS.Timeout[] = [];

  constructor(private readonly d: InjectorDeps) {}

  /** Schedules every fault relative to now. */
  start(plan: PlannedFault[]) {
    for (const f of plan) {
      this.timers.push(
        setTimeout(() => {
          const p = this.inject(f)
            .catch((err) => this.d.log(`fault ${f.kind} failed: ${String(err)}`))
            .finally(() => this.running.delete(p));
          this.running.add(p);
        }, f.at),
      );
    }
  }

  /** Waits for the faults in progress (and cancels any not yet started). */
  async settle(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    await Promise.all([...this.running]);
  }

  get lastFaultEndedAt(): number | undefined {
    return this.done.length ? Math.max(...this.done.map((f) => f.endedAt)) : undefined;
  }

  private async inject(f: PlannedFault): Promise<void> {
    const startedAt = Date.now();
    const detail = await this.run(f);
    const fault: InjectedFault = { ...f, startedAt, endedAt: Date.now(), detail };
    this.done.push(fault);
    this.d.log(`fault ${f.kind} (${((fault.endedAt - startedAt) / 1000).toFixed(1)} s): ${detail}`);
  }

  private async run(f: PlannedFault): Promise<string> {
    const d = this.d;
    switch (f.kind) {
      case 'worker-kill': {
        const i = f.target ?? 0;
        const w = d.workers[i]!;
        // Mid-handlers: wait (up to 3 s) until this worker has just finished a handler, i.e. it is
        // working through a batch and the next handlers are running.
        const deadline = Date.now() + 3_000;
        while (Date.now() - d.lastWorkerActivity[i]! > 150 && Date.now() < deadline) await sleep(20);
        const busy = Date.now() - d.lastWorkerActivity[i]! <= 150;
        const pid = w.pid;
        await w.kill('SIGKILL');
        await sleep(f.downMs);
        w.start();
        return `SIGKILL worker ${i} (pid ${pid}) ${busy ? 'mid-handlers' : 'while idle'}, down ${f.downMs} ms`;
      }
      case 'api-kill': {
        const pid = d.api.pid;
        await d.api.kill('SIGKILL');
        await sleep(f.downMs);
        d.api.start();
        await d.waitApiUp();
        return `SIGKILL API (pid ${pid}), down ${f.downMs} ms before restart`;
      }
      case 'smtp-outage': {
        await d.smtp.kill('SIGKILL');
        await sleep(f.downMs);
        d.smtp.start();
        await d.waitSmtpUp();
        return `SMTP server killed, restarted after ${f.downMs} ms`;
      }
      case 'pg-restart': {
        const t0 = Date.now();
        await d.postgres.stop(); // fast shutdown: SIGINT to the postmaster
        const stopped = Date.now() - t0;
        await sleep(f.downMs);
        await d.postgres.start();
        return `Postgres fast shutdown (${stopped} ms) and start; down ${Date.now() - t0} ms in all`;
      }
      case 'pg-terminate-workers': {
        const { rows } = await d.admin.query<{ n: number; names: string | null }>(
          `select count(*)::int as n, string_agg(distinct application_name, ',') as names
             from (select application_name, pg_terminate_backend(pid) as ok
                     from pg_stat_activity
                    where application_name like 'stayhub-worker%' and pid <> pg_backend_pid()) t
            where ok`,
        );
        return `pg_terminate_backend on ${rows[0]?.n ?? 0} worker connection(s) (${rows[0]?.names ?? 'none'})`;
      }
    }
  }
}
