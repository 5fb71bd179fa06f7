import type { Database } from '../../../src/db/client.ts';
import type { ChaosNats } from './nats-cluster.ts';
import type { ForgedEvent, StreamDeletion } from './observed.ts';

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
