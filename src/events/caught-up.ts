import type { ConsumerInfo, StreamInfo } from '@nats-io/jetstream';

/*
 * When a consumer group has truly read everything: what `consume:earnings --until-empty` waits
 * for before it exits 0, and the chaos run's judge trusts it. num_pending is counted by the group's
 * leader from its own server's copy of the stream, and in a cluster that copy can be behind: a
 * node wiped and restarted, or one that missed writes while it was down, leads the group before its
 * replica of the stream has caught up, and answers "nothing pending" over messages it does not hold
 * yet. So the count is believed only when the group's leader is the stream's leader or holds a
 * current replica of it. A replica elsewhere that is behind does not matter (the group does not
 * read from it), and a single server has no copy to doubt.
 */

/** Why the group is not caught up yet, or null when it is. */
export function notCaughtUp(consumer: ConsumerInfo, stream: StreamInfo): string | null {
  if (consumer.num_pending > 0 || consumer.num_ack_pending > 0) {
    return `${consumer.num_pending} pending and ${consumer.num_ack_pending} unacknowledged`;
  }
  if (!consumer.cluster && !stream.cluster) return null;
  const groupLeader = consumer.cluster?.leader;
  if (!groupLeader) return 'the group has no leader';
  const streamLeader = stream.cluster?.leader;
  if (!streamLeader) return 'the stream has no leader';
  if (groupLeader === streamLeader) return null;
  const copy = stream.cluster?.replicas?.find((r) => r.name === groupLeader);
  if (copy && copy.current && !copy.offline) return null;
  return `the group's leader ${groupLeader} holds no current copy of the stream`;
}
