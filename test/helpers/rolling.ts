import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { expect } from 'vitest';
import { countNotDone, statusCounts } from '../../src/outbox/testing.ts';
import { bookAStay, httpApi, pollApi, type Answer, type HttpApi } from './http.ts';
import { watchRun, type NpmRun } from './npm-run.ts';
import type { TestSmtpServer } from './smtp.ts';
import { waitFor } from './wait.ts';

/*
 * The drills that roll StayHub's processes while bookings keep arriving (an upgrade, a switch of
 * OUTBOX_WRITES): processes started from a tree's npm scripts, stopped as a deploy stops them
 * (SIGTERM), and paced booking clients whose every answer is kept for the test to judge.
 */

/** The file an npm script of `root`'s package.json runs (`node --import tsx <file>`). */
export function entryOf(root: string, script: string): string {
  const scripts = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const entry = /^node --import tsx (\S+\.ts)/.exec(scripts[script] ?? '')?.[1];
  if (!entry) throw new Error(`${root} has no npm script ${script} that runs a .ts file`);
  return path.join(root, entry);
}

/** Processes of npm scripts, each with `env(extra)` as its environment; `killAll` for afterAll. */
export function rollingProcesses(env: (extra: Record<string, string>) => NodeJS.ProcessEnv) {
  const started: NpmRun[] = [];
  return {
    env: (extra: Record<string, string> = {}) => env(extra),
    start: (root: string, script: string, extra: Record<string, string> = {}): NpmRun => {
      const run = watchRun(
        spawn(process.execPath, ['--import', 'tsx', entryOf(root, script)], {
          cwd: root,
          env: env(extra),
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
      started.push(run);
      return run;
    },
    /** SIGTERM, as a deploy stops a process; it must exit 0. */
    stop: async (run: NpmRun): Promise<void> => {
      const exited = new Promise<number | null>((resolve) => run.npm.once('exit', (code) => resolve(code)));
      run.npm.kill('SIGTERM');
      expect(await exited, run.lines.join('\n')).toBe(0);
    },
    /** Until the API on `port` answers /health; its output in the error if it exits or never does. */
    serving: async (port: number, run: NpmRun): Promise<void> => {
      await pollApi(
        async () => {
          if (run.npm.exitCode !== null) throw new Error(`the API on ${port} exited ${run.npm.exitCode}:\n${run.lines.join('\n')}`);
          return (await fetch(`http://127.0.0.1:${port}/health`)).ok ? true : undefined;
        },
        60_000,
        `the API on ${port}`,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${run.lines.join('\n')}`);
      });
    },
    async killAll(): Promise<void> {
      for (const p of started) p.npm.kill('SIGKILL');
      await Promise.all(started.map((p) => p.closed));
    },
    /** Log lines at error level or above, from every process started. */
    errors(): Record<string, any>[] {
      return started.flatMap((run) => run.json().filter((l) => Number(l.level) >= 50));
    },
  };
}

/**
 * Three clients booking one night each, on nights no other takes (from the 11th day on), every
 * third booking cancelled, until `stop()`. `moveTo` sends the next requests to another API.
 *
 * Each client pauses between bookings: the three still keep requests arriving through every step,
 * but a booking costs the API, the worker, the SMTP server and the test's email parsing their CPU,
 * and unpaced clients made some 400 bookings (a thousand emails) where a drill needs 25. Paced,
 * about 150 a drill.
 */
export function bookingLoad(first: { api: HttpApi; guestToken: string; propertyId: string }) {
  const PAUSE_MS = 250;
  let api = first.api;
  let nights = 10;
  let loading = true;
  const answers: { status: number; what: 'book' | 'cancel' }[] = [];
  const day = (n: number) => new Date(Date.now() + n * 86_400_000).toISOString().slice(0, 10);
  const failed = (err: Error): Answer => ({ status: 0, body: { error: err.message } });
  const client = async () => {
    while (loading) {
      const n = ++nights;
      const booked = await api
        .post('/bookings', { propertyId: first.propertyId, checkIn: day(n), checkOut: day(n + 1), guests: 1 }, first.guestToken)
        .catch(failed);
      answers.push({ status: booked.status, what: 'book' });
      if (booked.status === 201 && n % 3 === 0) {
        const cancelled = await api.post(`/bookings/${String(booked.body.id)}/cancel`, {}, first.guestToken).catch(failed);
        answers.push({ status: cancelled.status, what: 'cancel' });
      }
      await sleep(PAUSE_MS);
    }
  };
  const running = Promise.all([client(), client(), client()]);
  const booked = () => answers.filter((a) => a.what === 'book').length;
  return {
    answers,
    moveTo(next: HttpApi) {
      api = next;
    },
    /** Until `n` more bookings were answered, whatever the answer. */
    async more(n: number, what: string): Promise<void> {
      const target = booked() + n;
      await waitFor(async () => booked() >= target || undefined, 60_000, what);
    },
    async stop(): Promise<void> {
      loading = false;
      await running;
    },
    created: () => answers.filter((a) => a.what === 'book' && a.status === 201).length,
    cancelled: () => answers.filter((a) => a.what === 'cancel' && a.status === 200).length,
    /** Answers other than a booking made or a cancellation done: a 5xx, a 409, an unanswered request. */
    unexpected: () => answers.filter((a) => !(a.status === 201 || (a.what === 'cancel' && a.status === 200))),
  };
}

/**
 * A first session on the API at `port` (bookAStay, every answer a 201: one booking), then the
 * booking clients on its guest and flat.
 */
export async function firstSessionThenLoad(port: number) {
  const api = httpApi(`http://127.0.0.1:${port}`);
  const { guest, property, booking } = await bookAStay(api);
  expect([guest.status, property.status, booking.status]).toEqual([201, 201, 201]);
  const load = bookingLoad({ api, guestToken: guest.body.token, propertyId: property.body.id });
  load.answers.push({ status: booking.status, what: 'book' });
  return load;
}

/**
 * The drill's verdict, once the load is stopped: every answer a booking made or a cancellation
 * done (no 5xx, none unanswered), at least `atLeast` bookings, and everyMessageDoneOnce.
 */
export async function nothingLostNorDoubled(load: ReturnType<typeof bookingLoad>, url: string, smtp: TestSmtpServer, atLeast: number) {
  await load.stop();
  expect(load.unexpected()).toEqual([]);
  expect(load.created()).toBeGreaterThanOrEqual(atLeast);
  await everyMessageDoneOnce(url, smtp, { bookings: load.created(), cancellations: load.cancelled() });
}

/**
 * After the load: every message of the database at `url` DONE (none DEAD, none left), and each
 * booking's guest and host told once of it and once of its cancellation, by Message-ID at the SMTP
 * server: nothing lost, nothing done twice.
 */
export async function everyMessageDoneOnce(url: string, smtp: TestSmtpServer, made: { bookings: number; cancellations: number }) {
  const q = new pg.Client({ connectionString: url });
  await q.connect();
  try {
    await waitFor(async () => (await countNotDone(q)) === 0 || undefined, 60_000, 'every message DONE');
    expect((await statusCounts(q)).map((s) => s.status)).toEqual(['DONE']);
  } finally {
    await q.end();
  }
  const ids = smtp.received.map((m) => m.parsed.messageId);
  expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([]);
  expect(ids).toHaveLength(2 * made.bookings + 2 * made.cancellations);
}
