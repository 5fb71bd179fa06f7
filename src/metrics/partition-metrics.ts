import { Counter, type Registry } from 'prom-client';
import { partitionsReattached } from '../outbox/index.ts';

/**
 * stayhub_outbox_partitions_reattached_total: days of the outbox an interrupted
 * DETACH … CONCURRENTLY left half detached, that this process gave back (src/outbox/half-detached-days.ts,
 * ADR 0043). `where` says on which path this process does it, for the metric's help.
 */
export function registerPartitionsReattached(registry: Registry, where: string): void {
  new Counter({
    name: 'stayhub_outbox_partitions_reattached_total',
    help: `Half-detached day partitions this process gave back to the outbox (${where}).`,
    registers: [registry],
    collect() {
      this.reset();
      this.inc(partitionsReattached());
    },
  });
}
