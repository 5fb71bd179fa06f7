import type { Db } from '../../src/db/client.ts';
import { getMessages, insertMessages, type MessageRow } from '../../src/outbox/testing.ts';

/*
 * Outbox rows written and read directly, as no producer or worker would: a test sets up the state
 * it needs, or checks the state a run left, without going through enqueue or a claim.
 */

export { getMessages, insertMessages, makeDue, scheduledDelays, type MessageRow } from '../../src/outbox/testing.ts';

export async function insertMessage(db: Db, topic: string, payload: unknown = {}, key: string | null = null): Promise<MessageRow> {
  return (await insertMessages(db, [{ topic, payload, key }]))[0]!;
}

export async function getMessage(db: Db, id: number): Promise<MessageRow> {
  return (await getMessages(db, [id]))[0]!;
}
