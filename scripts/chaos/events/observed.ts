import type { Database } from '../../../src/db/client.ts';
import type { ChaosNats } from './nats-cluster.ts';
import type { hitNatsNode, natsOutage } from './node-faults.ts';

/*
 * What the events part of the chaos run acts on (its stage) and what it saw: of each of its faults
 * (for the fault's evidence, faults/), and of the forged events and stream deletions (for its
 * checks, check.ts).
 */

/** What the events faults act on: the cluster, the run's stream and group, and what they did so far. */
export interface EventsStage {
  nats: ChaosNats;
  stream: string;
  subjectPrefix: string;
  group: string;
  /** The forger's reads (a real booking to name, the dead letter it should become). */
  database(): Database;
  /** The forged events the stream accepted, and the stream's deletions, so far. */
  forged: ForgedEvent[];
  deletions: StreamDeletion[];
}

/** How a forged event lies (fault "forged-event"). */
export type ForgeryKind = 'unknown-booking' | 'wrong-amount';

/** A forged booking.created the stream accepted. */
export interface ForgedEvent {
  kind: ForgeryKind;
  messageId: string;
  /** The booking it names: one that does not exist (unknown-booking), or a real one (wrong-amount). */
  bookingId: string;
  /** A real property of the run, so of a real host. */
  propertyId: string;
  /** What it claims, and what the booking's total really is (wrong-amount). */
  total: number;
  realTotal: number | null;
  currency: string;
  /** The PubAck's stream sequence. */
  seq: number;
  publishedAt: number;
}

/** A deletion of the events stream (fault "stream-delete"). */
export interface StreamDeletion {
  /** When the delete was answered (ms epoch). */
  at: number;
  createdBefore: string;
  /** The recreated stream's creation time; null: not back within the bound. */
  createdAfter: string | null;
}

/** What a NATS outage (every node down) and a node kill or wipe did, for the fault's evidence (faults/). */
export type NatsOutageObserved = Awaited<ReturnType<typeof natsOutage>>;
export type NatsNodeObserved = Awaited<ReturnType<typeof hitNatsNode>>;

/** What a stream deletion did, for the fault's evidence (faults/). */
export interface StreamDeleteObserved {
  /** The stream's creation time before; null: there was no stream to delete. */
  createdBefore: string | null;
  messagesBefore: number;
  /** The server answered the delete with success. */
  deleted: boolean;
  /** The stream's creation time once it was back; null: not back within the bound. */
  createdAfter: string | null;
  /** How long after the delete the stream and the group's durable were both back, ms. */
  backAfterMs: number | null;
  groupBack: boolean;
}

/** What a forged event did (faults/): the stream's PubAck, and whether the consumer refused it yet. */
export interface ForgedEventObserved {
  forged: ForgedEvent | null;
  /** Why nothing was published (no booking yet, NATS or the database not answering). */
  failed?: string;
  /** How long after the publish the group's dead letter for it appeared; null: not within the wait. */
  deadLetteredAfterMs: number | null;
  lastError: string | null;
}
