import { withClient } from '../../lib/postgres.ts';
import { fillDoneHistory, type HistoryDay } from '../history.ts';
import type { BenchServer } from './server.ts';

/*
 * Our outbox holding a DONE history (the purge and growth sections): one template database per
 * history size, filled once, and a fresh clone of it for every measurement, dropped after it.
 */

export interface HistoryClones {
  /** `fn` on a fresh clone of the history of `rows` DONE rows, dropped after (clones of 400 MB add up). */
  on<T>(rows: number, fn: (url: string, history: HistoryDay) => Promise<T>): Promise<T>;
  /** Drops the template of `rows` (a larger day that serves nothing else: its GBs go at once). */
  dropTemplate(rows: number): Promise<void>;
}

export function historyClones(server: BenchServer, seq: () => number, log: (msg: string) => void): HistoryClones {
  const templates = new Map<number, Promise<{ db: string; history: HistoryDay }>>();
  const template = (rows: number) => {
    let t = templates.get(rows);
    if (!t) {
      t = (async () => {
        const started = Date.now();
        const db = `history_${rows}`;
        const history = await fillDoneHistory(await server.createDatabase(db, server.ourTemplate), rows);
        log(
          `   template ${db}: ${rows.toLocaleString('en-US')} DONE rows in ${history.partition}, ${((Date.now() - started) / 1000).toFixed(1)} s`,
        );
        return { db, history };
      })();
      templates.set(rows, t);
    }
    return t;
  };
  return {
    async on(rows, fn) {
      const name = `history_${rows}_${seq()}`;
      const { db, history } = await template(rows);
      const url = await cloneDatabase(server, name, db, rows >= FILE_COPY_FROM_ROWS ? 'file_copy' : 'wal_log');
      try {
        return await fn(url, history);
      } finally {
        await dropDatabase(server, name);
      }
    },
    async dropTemplate(rows) {
      await dropDatabase(server, (await template(rows)).db);
      templates.delete(rows);
    },
  };
}

async function admin(server: BenchServer, sql: string): Promise<void> {
  await withClient(server.url('postgres'), (c) => c.query(sql), 'bench-history');
}

/**
 * How a template is cloned. FILE_COPY copies the template's files after a checkpoint; the default
 * (WAL_LOG) writes every block of it to WAL, 2–3 s for 400 MB here against 1 s, and on every run.
 * But that checkpoint first flushes all the run has written since the last one: on a small
 * template (the smoke run's, a few MB) it cost up to 20 s on a busy disk, for a copy WAL_LOG makes
 * in a fraction of a second. The clone is made before the measurement, so it does not change what
 * is measured.
 */
const FILE_COPY_FROM_ROWS = 100_000;

async function cloneDatabase(server: BenchServer, name: string, template: string, strategy: 'file_copy' | 'wal_log'): Promise<string> {
  await admin(server, `create database "${name}" template "${template}" strategy ${strategy}`);
  return server.url(name);
}

/** Clones of 400 MB add up over a run: each goes once measured. */
async function dropDatabase(server: BenchServer, name: string): Promise<void> {
  await admin(server, `drop database if exists "${name}" with (force)`);
}
