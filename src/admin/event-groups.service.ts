import type { Db } from '../db/client.ts';
import { AppError } from '../errors.ts';
import { countOpenDeadLettersByGroup } from '../events/dead-letters.ts';
import { EventsUnavailableError } from '../events/errors.ts';
import type { EventsMonitor, StreamGroups } from '../events/monitor.ts';
import type { EventGroupsResponse } from './event-groups.schemas.ts';

export interface EventGroupsDeps {
  db: Db;
  /** Undefined when NATS_URL is not set. */
  events: EventsMonitor | undefined;
}

/**
 * The events stream and each consumer group's lag (from NATS) with its open dead letters (from
 * PostgreSQL). Not configured is an answer, not an error; NATS unreachable or too slow is a 503
 * (after EVENTS_ADMIN_TIMEOUT_MS at most), so the dashboard says so and keeps its other panels.
 */
export async function eventGroups(deps: EventGroupsDeps): Promise<EventGroupsResponse> {
  const generatedAt = new Date().toISOString();
  if (!deps.events) return { configured: false, stream: null, groups: [], generatedAt };
  const [read, deadLetters] = await Promise.all([
    deps.events.read().catch((err: unknown): never => {
      if (err instanceof EventsUnavailableError) {
        // The cause rides along for the error log (the error handler logs every >= 500 in full).
        throw Object.assign(new AppError('service_unavailable', `The events log is unavailable: ${err.message}`), { cause: err });
      }
      throw err;
    }),
    countOpenDeadLettersByGroup(deps.db),
  ]);
  const stream = { ...read.stream, firstAt: read.stream.firstAt?.toISOString() ?? null };
  return { configured: true, stream, groups: groupRows(read, deadLetters), generatedAt };
}

function groupRows(read: StreamGroups, deadLetters: Map<string, number>): EventGroupsResponse['groups'] {
  return read.groups.map((g) => ({
    name: g.group,
    pending: g.pending,
    ackPending: g.ackPending,
    oldestUnackedAgeSeconds: Math.round(g.oldestUnackedAgeSeconds * 10) / 10,
    openDeadLetters: deadLetters.get(g.group) ?? 0,
    eventsAgedOut: g.eventsAgedOut,
  }));
}
