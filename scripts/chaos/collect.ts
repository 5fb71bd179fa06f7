import { readFileSync } from 'node:fs';
import path from 'node:path';
import { checkResult, EVENT_CHECKS } from './checks.ts';
import type { Driven } from './drive.ts';
import type { JudgeInput } from './evidence.ts';
import { countByKind } from './fault-kinds.ts';
import { clientRecords, gather } from './gather.ts';
import { postgresCrashesIn } from './postgres-crashes.ts';
import { MAIL_DOMAIN } from './settings.ts';
import type { SinkRecord } from './smtp-sink.ts';
import type { ChaosStack, Say } from './stack.ts';

/*
 * After the drain: the webhooks' deliveries sent and checked, the earnings consumer read to the
 * end of the stream and the events path checked, then the evidence gathered (gather.ts: the
 * database, and the API asked about each client's booking while it is still up) into the judge's
 * input.
 */

/** The webhooks: every delivery sent (bounded), then their checks. */
async function webhookChecks(stack: ChaosStack, d: Driven, say: Say) {
  const drained = await d.hooks.drain(stack.admin!, Date.now() + 120_000);
  const checks = await d.hooks.check(stack.admin!);
  const f = d.hooks.figures!; // counted by check()
  say(
    `webhooks${drained ? '' : ' (NOT drained)'}: ${f.owed} owed to ${f.endpoints} endpoints, ${f.receivedValid} received signed; requests flaky ${f.requests.flaky}, down ${f.requests.down}, slow ${f.requests.slow}`,
  );
  return checks;
}

/** The events path: the consumer reads to the end of the stream, then its checks. Null: that part did not run. */
async function eventChecks(stack: ChaosStack, say: Say): Promise<JudgeInput['events']> {
  const ev = stack.ev;
  if (!ev) return null;
  const caughtUp: string[] = [];
  await ev.finish().catch((err: Error) => caughtUp.push(err.message));
  const events = { checks: [checkResult(EVENT_CHECKS.caughtUp, caughtUp), ...(await ev.check())] };
  const f = ev.figures!; // counted by check()
  say(
    `events: ${f.bookingEventsInOutbox} booking events in the outbox, ${f.bookingMessagesInStream} in the stream (${f.goneWithDeletedStream} gone with ${f.streamDeletions} deleted stream(s)), ${f.ledgerLines} ledger lines, ${f.deadLetters} consumer dead letters, ${f.forgedRefused} of ${f.forged} forged events refused`,
  );
  return events;
}

export async function collect(stack: ChaosStack, d: Driven, durationSeconds: number, say: Say) {
  const webhooks = { checks: await webhookChecks(stack, d, say) };
  const events = await eventChecks(stack, say);
  const records = readFileSync(stack.recordFile, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as SinkRecord);
  // The clients' own count of abandoned requests, taken before the look-ups add their own.
  const clientsGaveUp = d.client.gaveUp;
  const gathered = await gather(stack.admin!, d.client, [...d.load.bookings.values()]);
  const input: JudgeInput = {
    durationSeconds,
    mailDomain: MAIL_DOMAIN,
    bounceEmails: stack.bounceEmails,
    handledTopics: stack.handledTopics,
    bookings: gathered.bookings,
    outbox: gathered.outbox,
    overlaps: gathered.overlaps,
    records,
    clientBookings: clientRecords(d.load.bookings.values()),
    lookups: gathered.lookups,
    serverErrors: d.client.serverErrors,
    clientsGaveUp,
    idempotencyMismatches: d.load.figures.idempotencyMismatches,
    faultsPlanned: countByKind(d.plan),
    faults: d.injector.done,
    unplannedExits: [
      ...stack
        .unplannedExits()
        .flatMap(([name, exits]) =>
          exits.map((e) => ({ process: name, at: e.at, code: e.code, signal: e.signal, lastLines: e.lastLines })),
        ),
      ...postgresCrashesIn(path.join(stack.logs, 'postgres.log')),
    ],
    drained: d.drainedAt !== null,
    events,
    webhooks,
  };
  return { input, gathered };
}
