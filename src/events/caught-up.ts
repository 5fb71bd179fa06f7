import type { ClusterInfo, ConsumerInfo, StreamInfo } from '@nats-io/jetstream';

/*
 * When a consumer group has truly read everything: what `consume:earnings --until-empty` waits
 * for before it exits 0, and the chaos run's judge trusts it. num_pending is what the group's
 * current leader counts from its own copy of the stream, and in a cluster that copy can be behind:
 * a node wiped and started empty, elected before it has caught up, answers "nothing pending" over
 * a stream it does not yet hold. So the count is believed only from a cluster that is whole, the
 * stream's and the group's: a leader, and every replica current and online. A single server has no
 * cluster to doubt.
 */

/** Why the group is not caught up yet, or null when it is. */
export function notCaughtUp(consumer: ConsumerInfo, stream: StreamInfo): string | null {
  if (consumer.num_pending > 0 || consumer.num_ack_pending > 0) {
    return `${consumer.num_pending} pending and ${consumer.num_ack_pending} unacknowledged`;
  }
  return unsettledCluster('the stream', stream.cluster) ?? unsettledCluster('the group', consumer.cluster);
}

/** What keeps a replicated asset's answer from being trusted, or null (also for a single server). */
function unsettledCluster(what: string, cluster: ClusterInfo | undefined): string | null {
  if (!cluster) return null;
  if (!cluster.leader) return `${what} has no leader`;
  const behind = (cluster.replicas ?? []).filter((r) => !r.current || r.offline).map((r) => r.name);
  return behind.length ? `${what}'s replicas ${behind.join(', ')} are not current` : null;
}
