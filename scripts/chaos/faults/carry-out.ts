import type { FaultKind } from '../fault-kinds.ts';
import { apiKill } from './api-kill.ts';
import { consumerKill } from './consumer-kill.ts';
import { forgedEvent } from './forged-event.ts';
import { natsNodeKillOrWipe } from './nats-node.ts';
import { natsOutage } from './nats-outage.ts';
import { pgRestart } from './pg-restart.ts';
import { pgTerminateWorkers } from './pg-terminate-workers.ts';
import { smtpOutage } from './smtp-outage.ts';
import { streamDelete } from './stream-delete.ts';
import type { FaultEffect, InjectorDeps, PlannedFault } from './types.ts';
import { workerKill } from './worker-kill.ts';

/** How each kind of fault is carried out: one module a kind. */
export const CARRY_OUT: Record<FaultKind, (f: PlannedFault, d: InjectorDeps) => Promise<FaultEffect>> = {
  'worker-kill': workerKill,
  'api-kill': apiKill,
  'smtp-outage': smtpOutage,
  'pg-restart': pgRestart,
  'pg-terminate-workers': pgTerminateWorkers,
  'consumer-kill': consumerKill,
  'nats-outage': natsOutage,
  'stream-delete': streamDelete,
  'forged-event': forgedEvent,
  'nats-node-kill': natsNodeKillOrWipe,
  'nats-node-wipe': natsNodeKillOrWipe,
};
