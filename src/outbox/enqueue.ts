import { runAfterCommit, runAtEnd, type Tx } from '../db/transaction.ts';
import { activeTraceContext } from '../telemetry/tracing.ts';
import { wakeUpNaming } from './channel.ts';
import { executorOf, run, statement, type Statement } from './executor.ts';
import { outboxWrites, walMessageSql } from './wal-messages.ts';
import { carriesWakeUpInside, wakeUpFor } from './wake-up.ts';

/**
 * `key`: messages of one key are handled in the order they were written. The rest is what enqueue
 * writes beside a message so that the claim can order it (ADR 0033, src/outbox/claim.ts):
 *
 * - `priority`: the topic's, as the application registered it; higher is claimed first, 0 when
 *   not given. The outbox knows no topic's meaning: only that a higher number is claimed first.
 * - `group`: whose work it is (for the application, an owner's public id), as the caller passes
 *   it; groups take turns in the claim, so one group's flood does not hold back another's
 *   messages. The outbox knows no host either: a group is a string.
 * - `owner`: who caused it (for the application, the public id of the account whose action wrote
 *   it), above the group: owners take turns too, so one owner writing through many groups (one
 *   account acting on 2,400 others' groups) does not hold back another owner's messages (ADR 0039).
 *   Not given: the group is its own owner, as before owners existed.
 * - `turn`, not an option: outbox_turn(group, owner, priority)
 *   (src/outbox/migrations/0006_head_from_where_it_was.sql), in the same statement as the INSERT:
 *   the latest of the head of the priority's queue, the group's latest turn + 1 and the owner's
 *   latest turn + 1. Three index probes from plans made once per connection (ADR 0055), the head's
 *   from where the connection last found it (ADR 0060), no lock, no counter row that writers would
 *   queue on: a producer never waits for another, nor for itself beyond its own transaction.
 *
 * Rows written without a turn (the bench's and tests' bulk inserts, lane messages, anything written
 * by SQL of its own) are claimed oldest first beside the turns, as every message was before.
 */
export interface EnqueueOptions {
  key?: string;
  group?: string;
  owner?: string;
  priority?: number;
}

export interface EnqueuedMessage {
  /** The row's id and public id; null when the message went to the WAL (OUTBOX_WRITES=wal): the worker makes its row. */
  id: number | null;
  publicId: string | null;
  topic: string;
}

/**
 * Writes an event into the outbox as part of the caller's transaction.
 *
 * It takes a transaction (`Tx`), not a pool: an event cannot be written outside one. And it never
 * commits: the caller's COMMIT is the single boundary that makes the business change and its event
 * exist together, or neither. A commit in here would reopen the gap the outbox exists to close.
 *
 * The payload is stored as a JSON snapshot. The outbox knows no topic and no schema: the
 * application validates the payload against its topic's schema before it calls this (its typed
 * wrapper, src/messages/enqueue.ts), and the worker checks it again with the schemas it was given.
 *
 * The worker's wake-up (`pg_notify('outbox', …)`) takes one of two paths (outbox/wake-up.ts):
 * - **Inside the transaction**, delivered by the COMMIT with no round trip of its own, when no
 *   other transaction of this process carries one: the fastest wake-up, for the common case of a
 *   producer that is not busy. It names the message (its public id, src/outbox/channel.ts), so an
 *   idle worker claims it by id.
 * - **Right after the COMMIT**, coalesced with the other commits of the moment, under load. A
 *   NOTIFY inside a transaction holds PostgreSQL's cluster-wide notification lock through the
 *   commit and its WAL flush, so notifying transactions commit one at a time
 *   (docs/adr/0002-notify-after-commit.md has the measurement); one at a time per process keeps
 *   them off that queue.
 * - **None, with OUTBOX_WRITES=wal.** The message is not yet a row when its commit returns, so a
 *   claim it woke would find nothing: the worker that streams the slot makes the row and sends the
 *   wake-up itself (outbox_make_rows, src/outbox/wal-stream.ts).
 * Either way the outbox row is atomic with the business change and a rolled-back transaction
 * wakes nobody. If the process dies between a COMMIT and its after-commit notify, the worker's
 * POLL_INTERVAL_MS poll finds the row. A transaction not started by `withTransaction` (which runs
 * after-commit work) always gets the notify inside it.
 *
 * With tracing on, the row also stores the active span's W3C trace context (traceparent,
 * tracestate): the worker's handling of the message continues the request's trace. With tracing
 * off the statement is the one it always was: no context looked for, no column written.
 */
export async function enqueue(tx: Tx, topic: string, payload: unknown, opts: EnqueueOptions = {}): Promise<EnqueuedMessage> {
  const snapshot = JSON.stringify(payload);
  const toWal = outboxWrites() === 'wal';
  const trace = activeTraceContext();
  const values = [topic, snapshot, opts.key ?? null, opts.priority ?? 0, opts.group ?? null, ownerOf(opts)];
  if (trace) values.push(trace.traceparent, trace.tracestate);
  const [row] = await run<{ id: string | null; public_id: string | null; topic: string }>(
    executorOf(tx),
    toWal ? walEnqueueStatement(trace !== null) : enqueueStatement(wakesInside(tx, topic), trace !== null),
    values,
  );
  return { id: row!.id === null ? null : Number(row!.id), publicId: row!.public_id, topic: row!.topic };
}

/**
 * enqueue's message written to the WAL (src/outbox/wal-messages.ts): no row yet, so no id to return;
 * the worker makes the row, and its ids, from the message. No wake-up: see enqueue.
 */
function walEnqueueStatement(traced: boolean): Statement {
  const name = `outbox-enqueue-wal${traced ? '-traced' : ''}`;
  let s = enqueueStatements.get(name);
  if (!s) {
    s = statement(name, `select null::bigint as id, null::uuid as public_id, $1::text as topic, ${walMessageSql(1, traced)} as written`);
    enqueueStatements.set(name, s);
  }
  return s;
}

const enqueueStatements = new Map<string, Statement>();

/**
 * enqueue's INSERT, built once per notify variant and trace variant (traced: two more parameters,
 * the trace context; untraced: the statement as before tracing). $1 topic, $2 payload, $3 key,
 * $4 priority, $5 group, $6 owner.
 */
function enqueueStatement(notifyInside: boolean, traced: boolean): Statement {
  const name = `outbox-enqueue${notifyInside ? '-notify' : ''}${traced ? '-traced' : ''}`;
  let s = enqueueStatements.get(name);
  if (!s) {
    const notify = notifyInside ? `, ${wakeUpNaming('public_id')}` : '';
    const [traceColumns, traceValues] = traced ? [', traceparent, tracestate', ', $7, $8'] : ['', ''];
    s = statement(
      name,
      `with ins as (
         insert into outbox (topic, payload, key, priority, group_id, owner_id, turn${traceColumns})
         values ($1, $2::jsonb, $3, $4::int, $5::text, $6::text,
                 outbox_turn($5::text, $6::text, $4::int)${traceValues})
         returning id, public_id, topic
       )
       select id, public_id, topic${notify} from ins`,
    );
    enqueueStatements.set(name, s);
  }
  return s;
}

/** A business row's INSERT … RETURNING, as a named statement: what `insertWithEvent` writes its event beside. */
export interface RowInsert {
  /** Unique per SQL text (a named statement). */
  readonly name: string;
  /** `insert into … values ($1 … $n) [on conflict do nothing] returning <columns>`. */
  readonly text: string;
  readonly values: readonly unknown[];
}

/**
 * `enqueue`, folded into the statement that writes the business row: the row and its event in ONE
 * round trip, for a hot path (a business write on every request). The outbox row is inserted from the row's RETURNING,
 * so it exists exactly when the row does: an insert that writes nothing (`on conflict do nothing`:
 * the exclusion constraint refused the stay) writes no event either, without an error, and the
 * transaction stays usable. Everything else is `enqueue`'s rules: the caller's transaction, the
 * payload validated by the caller, the wake-up inside the transaction or after it.
 * Returns the row as RETURNING gave it, or undefined when nothing was written.
 *
 * One round trip of six on the application's hottest write path: measured with pgbench at 8
 * clients, the outbox row cost that write 19.8 % as a statement of its own and 10.0 % folded in
 * (medians of three rounds; ADR 0010 in docs/adr/).
 */
export async function insertWithEvent(
  tx: Tx,
  insert: RowInsert,
  topic: string,
  payload: unknown,
  opts: EnqueueOptions = {},
): Promise<Record<string, any> | undefined> {
  const snapshot = JSON.stringify(payload);
  const toWal = outboxWrites() === 'wal';
  const notifyInside = !toWal && wakesInside(tx, topic);
  const trace = activeTraceContext();
  const values = [...insert.values, topic, snapshot, opts.key ?? null, opts.priority ?? 0, opts.group ?? null, ownerOf(opts)];
  if (trace) values.push(trace.traceparent, trace.tracestate);
  const [row] = await run<Record<string, any>>(executorOf(tx), withEventStatement(insert, toWal, notifyInside, trace !== null), values);
  return row;
}

/** The owner a message is written with: the one given, or its group (a group is then its own owner). */
function ownerOf(opts: EnqueueOptions): string | null {
  return opts.owner ?? opts.group ?? null;
}

const withEventStatements = new Map<string, Statement>();

/**
 * The row's INSERT wrapped with the outbox's, built once per insert statement, notify variant and
 * trace variant (traced: two more parameters, the trace context; untraced: the statement as before tracing).
 */
function withEventStatement(insert: RowInsert, toWal: boolean, notifyInside: boolean, traced: boolean): Statement {
  const name = `${insert.name}+outbox${toWal ? '-wal' : ''}${notifyInside ? '-notify' : ''}${traced ? '-traced' : ''}`;
  let s = withEventStatements.get(name);
  if (!s && toWal) {
    // The message written to the WAL once per row the insert returned, in the select's own list:
    // no second CTE for the planner to plan on every execution behind a transaction pooler. No
    // wake-up: see enqueue.
    const n = insert.values.length;
    s = statement(name, `with r as (${insert.text}) select r.*, ${walMessageSql(n + 1, traced)} as written from r`);
    withEventStatements.set(name, s);
  }
  if (!s) {
    const n = insert.values.length;
    const notify = notifyInside ? `, (select ${wakeUpNaming('e.public_id')} from e) as notified` : '';
    const [traceColumns, traceValues] = traced ? [', traceparent, tracestate', `, $${n + 7}, $${n + 8}`] : ['', ''];
    s = statement(
      name,
      `with r as (${insert.text}),
            e as (insert into outbox (topic, payload, key, priority, group_id, owner_id, turn${traceColumns})
                  select $${n + 1}, $${n + 2}::jsonb, $${n + 3}, $${n + 4}::int, $${n + 5}::text, $${n + 6}::text,
                         outbox_turn($${n + 5}::text, $${n + 6}::text, $${n + 4}::int)${traceValues} from r
                  returning public_id)
       select r.*${notify} from r`,
    );
    withEventStatements.set(name, s);
  }
  return s;
}

/**
 * Whether the statement that writes the message must send the worker's wake-up itself (inside
 * the transaction). Otherwise it is asked for after the commit.
 */
function wakesInside(tx: Tx, topic: string): boolean {
  return carriesWakeUpInside(tx, (ended) => runAtEnd(tx, ended)) || !wakeWorkerAfterCommit(tx, topic);
}

/**
 * Asks for the worker's wake-up after `tx` commits. False when `tx` was not started by
 * `withTransaction`: the statement that writes the message must then carry the wake-up itself.
 */
function wakeWorkerAfterCommit(tx: Tx, topic: string): boolean {
  // Coalesced across concurrent commits (outbox/wake-up.ts): still a notify after this commit. Not
  // awaited: the caller's answer does not depend on it (it cannot fail the commit, and a lost one
  // is found by the worker's poll), and while it is in flight the next commits share the next one.
  return runAfterCommit(tx, `outbox-notify:${topic}`, async (db) => {
    void wakeUpFor(executorOf(db), topic).request();
  });
}
