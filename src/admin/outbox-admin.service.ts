import type { z } from 'zod';
import type { Db } from '../db/client.ts';
import { AppError } from '../errors.ts';
import type { UserRow } from '../users/users.repository.ts';
import * as outbox from '../outbox/index.ts';
import { outboxStats, requeueDead, type HandlerCatalogue, type RequeueResult } from '../outbox/index.ts';

import { encodeCursor, publicIdOfCursor } from '../pagination.ts';
import type {
  BulkRetryBody,
  handlerState,
  historyEvent,
  ListMessagesQuery,
  messageDetailResponse,
  messageSummary,
  statsResponse,
} from './outbox-admin.schemas.ts';

export interface OutboxAdminDeps {
  db: Db;
  catalogue: HandlerCatalogue;
}

type Summary = z.infer<typeof messageSummary>;
type HandlerState = z.infer<typeof handlerState>;

/** Outbox stats with each topic marked handled or not, and the unhandled ones that hold messages by name. */
export async function stats(deps: OutboxAdminDeps): Promise<z.infer<typeof statsResponse>> {
  const s = await outboxStats(deps.db);
  const byTopic = s.byTopic.map((t) => ({ ...t, handled: deps.catalogue.isHandled(t.topic) }));
  return {
    ...s,
    byTopic,
    unknownTopics: byTopic.filter((t) => !t.handled && t.pending > 0).map((t) => t.topic),
    generatedAt: new Date().toISOString(),
  };
}

/**
 * Each registered handler's state for this message, from handlers_done and the message's status,
 * plus handlers recorded as done that are no longer registered (renamed or removed).
 */
function handlerStates(catalogue: HandlerCatalogue, m: outbox.OutboxMessageRow): HandlerState[] {
  const done = new Set(m.handlersDone);
  // A lane message runs its one handler (src/outbox/lanes.ts); the topic's others ran on its original.
  const registered = m.lane === null ? catalogue.handlersFor(m.topic) : [m.lane];
  const states: HandlerState[] = registered.map((name) => ({
    name,
    state: done.has(name) ? 'done' : m.status === 'PENDING' ? 'pending' : m.status === 'DEAD' ? 'dead' : 'not_run',
  }));
  for (const name of m.handlersDone) if (!registered.includes(name)) states.push({ name, state: 'retired' });
  return states;
}

function summary(catalogue: HandlerCatalogue, m: outbox.OutboxMessageRow): Summary {
  return {
    id: m.publicId,
    topic: m.topic,
    key: m.key,
    status: m.status,
    leased: m.leased,
    attempts: m.attempts,
    availableAt: m.availableAt.toISOString(),
    leasedUntil: m.leased && m.leasedUntil ? m.leasedUntil.toISOString() : null,
    createdAt: m.createdAt.toISOString(),
    claimedAt: m.claimedAt?.toISOString() ?? null,
    processedAt: m.processedAt?.toISOString() ?? null,
    lastError: m.lastError,
    handlersDone: m.handlersDone,
    lane: m.lane,
    originId: m.originId,
    traceId: m.traceId,
    topicHandled: catalogue.isHandled(m.topic),
    handlers: handlerStates(catalogue, m),
  };
}

const badCursor = (message: string) => new AppError('validation_failed', 'Invalid cursor', [{ path: 'querystring.cursor', message }]);

/** Same cursor convention as GET /bookings: the last item's public id, base64url-encoded. */
async function idOfCursor(db: Db, cursor: string): Promise<number> {
  const publicId = publicIdOfCursor(cursor);
  if (publicId === undefined) throw badCursor('invalid cursor');
  const id = await outbox.idOf(db, publicId);
  // The cursor's message was purged (DONE rows are deleted after OUTBOX_RETENTION_DAYS).
  if (id === undefined) throw badCursor('the cursor refers to a message that no longer exists; start again');
  return id;
}

export async function listMessagesPage(deps: OutboxAdminDeps, q: ListMessagesQuery) {
  const beforeId = q.cursor ? await idOfCursor(deps.db, q.cursor) : undefined;
  const rows = await outbox.listMessages(deps.db, { status: q.status, topic: q.topic, beforeId, limit: q.limit + 1 });
  const page = rows.slice(0, q.limit);
  const last = page.at(-1);
  return {
    items: page.map((m) => summary(deps.catalogue, m)),
    nextCursor: rows.length > q.limit && last ? encodeCursor(last.publicId) : null,
  };
}

export async function getMessage(deps: OutboxAdminDeps, publicId: string): Promise<z.infer<typeof messageDetailResponse>> {
  const m = await outbox.findMessage(deps.db, publicId);
  if (!m) throw new AppError('not_found', 'No outbox message with this id');
  const audit = await outbox.auditFor(deps.db, publicId);

  type Event = z.infer<typeof historyEvent>;
  const history: Event[] = [{ at: m.createdAt.toISOString(), event: 'created' }];
  for (const a of audit) {
    history.push({ at: a.at.toISOString(), event: 'requeued', detail: `${a.action} by ${a.actor} (${a.affected} message(s))` });
  }
  if (m.claimedAt) {
    history.push({ at: m.claimedAt.toISOString(), event: 'claimed', detail: `latest claim; attempt ${m.attempts}` });
  }
  if (m.status === 'PENDING') {
    history.push(
      m.leased && m.leasedUntil
        ? { at: m.leasedUntil.toISOString(), event: 'available', detail: 'lease runs out (a worker holds it)' }
        : { at: m.availableAt.toISOString(), event: 'available', detail: m.attempts > 0 ? 'next attempt' : 'claimable' },
    );
  } else if (m.processedAt) {
    history.push({
      at: m.processedAt.toISOString(),
      event: m.status === 'DONE' ? 'done' : 'dead',
      detail: m.status === 'DEAD' ? (m.lastError ?? undefined) : undefined,
    });
  }
  history.sort((a, b) => a.at.localeCompare(b.at));
  return { ...summary(deps.catalogue, m), payload: m.payload, history };
}

const actorOf = (admin: UserRow) => ({ userId: admin.id, label: `admin:${admin.email}` });

/** Replays one dead letter. 404 if there is no such message; 409 if it is not DEAD (a DONE one would repeat its effects). */
export async function retryOne(deps: OutboxAdminDeps, admin: UserRow, publicId: string): Promise<RequeueResult> {
  const m = await outbox.findMessage(deps.db, publicId);
  if (!m) throw new AppError('not_found', 'No outbox message with this id');
  if (m.status !== 'DEAD') throw new AppError('conflict', `The message is ${m.status}; only DEAD messages can be retried`);
  const result = await requeueDead(deps.db, { ids: [publicId] }, actorOf(admin));
  // Another admin (or the CLI) replayed it between our read and the update.
  if (result.affected === 0) throw new AppError('conflict', 'The message is no longer DEAD');
  return result;
}

/** Replays the DEAD messages named by id, or every DEAD message of one topic. Non-DEAD ids are skipped. */
export async function retryMany(deps: OutboxAdminDeps, admin: UserRow, body: BulkRetryBody): Promise<RequeueResult> {
  const criteria = 'ids' in body ? { ids: [...new Set(body.ids)] } : { topic: body.topic };
  return requeueDead(deps.db, criteria, actorOf(admin));
}

export async function depth(deps: OutboxAdminDeps, minutes: number) {
  const points = await outbox.depthHistory(deps.db, minutes);
  return { points: points.map((p) => ({ at: p.at.toISOString(), pending: p.pending, dead: p.dead })) };
}
