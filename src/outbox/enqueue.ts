import { sql } from 'drizzle-orm';
import { clientOf, poolOf, run, statement, type Statement } from '../db/prepared.ts';
import { runAfterCommit, type Tx } from '../db/transaction.ts';
import { activeTraceContext } from '../telemetry/tracing.ts';
import { OUTBOX_CHANNEL, TOPICS, type PayloadOf, type TopicName } from './topics.ts';
import { priorityOf } from './turns.ts';
import { carriesWakeUpInside, wakeUpFor } from './wake-up.ts';

/**
 * `key`: messages of one key are handled in the order they were written. `group`: whose work it is
 * (a host's public id); groups take turns in the claim, so one group's flood does not hold back
 * another's messages (src/outbox/turns.ts). Both are the caller's: the outbox knows neither.
 */
export interface EnqueueOptions {
  key?: string;
  group?: string;
}

export interface EnqueuedMessage {
  id: number;
  publicId: string;
  topic: string;
}

/**
 * Writes an event into the outbox as part of the caller's transaction.
 *
 * It takes a transaction (`Tx`), not a pool: an event cannot be written outside one. And it never
 * commits: the caller's COMMIT is the single boundary that makes the business change and its event
 * exist together, or neither. A commit in here would reopen the gap the outbox exists to close.
 *
 * The payload is validated against its topic's schema and stored as a JSON snapshot.
 *
 * The worker's wake-up (`pg_notify('outbox', topic)`) takes one of two paths (outbox/wake-up.ts):
 * - **Inside the transaction**, delivered by the COMMIT with no round trip of its own, when no
 *   other transaction of this process carries one: the fastest wake-up, for the common case of a
 *   producer that is not busy.
 * - **Right after the COMMIT**, coalesced with the other commits of the moment, under load. A
 *   NOTIFY inside a transaction holds PostgreSQL's cluster-wide notification lock through the
 *   commit and its WAL flush, so notifying transactions commit one at a time
 *   (docs/adr/0002-notify-after-commit.md has the measurement); one at a time per process keeps
 *   them off that queue.
 * Either way the outbox row is atomic with the business change and a rolled-back transaction
 * wakes nobody. If the process dies between a COMMIT and its after-commit notify, the worker's
 * POLL_INTERVAL_MS poll finds the row. A transaction not started by `withTransaction` (which runs
 * after-commit work) always gets the notify inside it.
 *
 * With tracing on, the row also stores the active span's W3C trace context (traceparent,
 * tracestate): the worker's handling of the message continues the request's trace. With tracing
 * off the statement is the one it always was: no context looked for, no column written.
 */
export async function enqueue<T extends TopicName>(
  tx: Tx,
  topic: T,
  payload: PayloadOf<T>,
  opts: EnqueueOptions = {},
): Promise<EnqueuedMessage> {
  const snapshot = outboxSnapshot(topic, payload);
  const notifyInside = wakesInside(tx, topic) ? sql`, pg_notify(${OUTBOX_CHANNEL}, topic)` : sql``;
  const group = opts.group ?? null;
  const priority = priorityOf(topic);
  const trace = activeTraceContext();
  const [traceColumns, traceValues] = trace
    ? [sql`, traceparent, tracestate`, sql`, ${trace.traceparent}, ${trace.tracestate}`]
    : [sql``, sql``];
  const { rows } = await tx.execute<{ id: string; public_id: string; topic: string }>(sql`
    with ins as (
      insert into outbox (topic, payload, key, priority, group_id, turn${traceColumns})
      values (${topic}, ${snapshot}::jsonb, ${opts.key ?? null}, ${priority}, ${group},
              outbox_turn(${group}::text, ${priority}::int)${traceValues})
      returning id, public_id, topic
    )
    select id, public_id, topic ${notifyInside} from ins`);
  const row = rows[0]!;
  return { id: Number(row.id), publicId: row.public_id, topic: row.topic };
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
 * round trip, for a hot path (the booking). The outbox row is inserted from the row's RETURNING,
 * so it exists exactly when the row does: an insert that writes nothing (`on conflict do nothing`:
 * the exclusion constraint refused the stay) writes no event either, without an error, and the
 * transaction stays usable. Everything else is `enqueue`'s rules: the caller's transaction, the
 * payload validated against its topic's schema, the wake-up inside the transaction or after it.
 * Returns the row as RETURNING gave it, or undefined when nothing was written.
 *
 * One round trip of six on the booking path: measured with pgbench at 8 clients, the outbox row
 * cost a booking 19.8 % as a statement of its own and 10.0 % folded in (medians of three rounds;
 * docs/adr/0010-booking-and-event-in-one-statement.md).
 */
export async function insertWithEvent<T extends TopicName>(
  tx: Tx,
  insert: RowInsert,
  topic: T,
  payload: PayloadOf<T>,
  opts: EnqueueOptions = {},
): Promise<Record<string, any> | undefined> {
  const snapshot = outboxSnapshot(topic, payload);
  const notifyInside = wakesInside(tx, topic);
  const trace = activeTraceContext();
  const values = [...insert.values, topic, snapshot, opts.key ?? null, priorityOf(topic), opts.group ?? null];
  if (trace) values.push(trace.traceparent, trace.tracestate);
  const [row] = await run<Record<string, any>>(clientOf(tx), withEventStatement(insert, notifyInside, trace !== null), values);
  return row;
}

const withEventStatements = new Map<string, Statement>();

/**
 * The row's INSERT wrapped with the outbox's, built once per insert statement, notify variant and
 * trace variant (traced: two more parameters, the trace context; untraced: the statement as before tracing).
 */
function withEventStatement(insert: RowInsert, notifyInside: boolean, traced: boolean): Statement {
  const name = `${insert.name}+outbox${notifyInside ? '-notify' : ''}${traced ? '-traced' : ''}`;
  let s = withEventStatements.get(name);
  if (!s) {
    const n = insert.values.length;
    const notify = notifyInside ? `, (select pg_notify('${OUTBOX_CHANNEL}', e.topic) from e) as notified` : '';
    const [traceColumns, traceValues] = traced ? [', traceparent, tracestate', `, $${n + 6}, $${n + 7}`] : ['', ''];
    s = statement(
      name,
      `with r as (${insert.text}),
            e as (insert into outbox (topic, payload, key, priority, group_id, turn${traceColumns})
                  select $${n + 1}, $${n + 2}::jsonb, $${n + 3}, $${n + 4}::int, $${n + 5}::text, outbox_turn($${n + 5}::text, $${n + 4}::int)${traceValues} from r
                  returning topic)
       select r.*${notify} from r`,
    );
    withEventStatements.set(name, s);
  }
  return s;
}

/** The payload, validated against its topic's schema, as the JSON stored in `outbox.payload`. */
function outboxSnapshot<T extends TopicName>(topic: T, payload: PayloadOf<T>): string {
  return JSON.stringify(TOPICS[topic].parse(payload));
}

/**
 * Whether the statement that writes the message must send the worker's wake-up itself (inside
 * the transaction). Otherwise it is asked for after the commit.
 */
function wakesInside(tx: Tx, topic: TopicName): boolean {
  return carriesWakeUpInside(tx) || !wakeWorkerAfterCommit(tx, topic);
}

/**
 * Asks for the worker's wake-up after `tx` commits. False when `tx` was not started by
 * `withTransaction`: the caller must then send `pg_notify(OUTBOX_CHANNEL, topic)` inside it.
 */
function wakeWorkerAfterCommit(tx: Tx, topic: TopicName): boolean {
  // Coalesced across concurrent commits (outbox/wake-up.ts): still a notify after this commit. Not
  // awaited: the caller's answer does not depend on it (it cannot fail the commit, and a lost one
  // is found by the worker's poll), and while it is in flight the next commits share the next one.
  return runAfterCommit(tx, `outbox-notify:${topic}`, async (db) => {
    void wakeUpFor(poolOf(db), topic).request();
  });
}
