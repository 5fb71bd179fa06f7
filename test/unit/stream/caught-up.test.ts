import type { ConsumerInfo, StreamInfo } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { notCaughtUp } from '../../../src/events/caught-up.ts';

/*
 * `consume:earnings --until-empty` exits once the group is caught up (src/events/caught-up.ts): the
 * count of what is pending is believed only from a group leader whose copy of the stream is
 * current, since a leader on a node that has not caught up counts nothing pending over messages it
 * does not hold yet.
 */

const peer = (name: string, current = true, offline = false) => ({ name, current, offline, active: 1_000_000, lag: 0 });
const cluster = (leader: string | undefined, ...replicas: ReturnType<typeof peer>[]) => ({ name: 'c', leader, replicas });
const consumer = (over: Partial<ConsumerInfo> = {}) =>
  ({ num_pending: 0, num_ack_pending: 0, cluster: cluster('n1', peer('n2'), peer('n3')), ...over }) as unknown as ConsumerInfo;
const stream = (over: Partial<StreamInfo> = {}) => ({ cluster: cluster('n1', peer('n2'), peer('n3')), ...over }) as unknown as StreamInfo;

describe('a consumer group caught up', () => {
  it('is one with nothing pending or unacknowledged, led where the stream is led', () => {
    expect(notCaughtUp(consumer(), stream())).toBeNull();
  });

  it('is one whose leader holds a current replica of the stream, whatever a third node is doing', () => {
    const led = consumer({ cluster: cluster('n2', peer('n1'), peer('n3')) });
    expect(notCaughtUp(led, stream({ cluster: cluster('n1', peer('n2'), peer('n3', false)) }))).toBeNull();
  });

  it('is one with nothing pending on a single server (no copy to doubt)', () => {
    expect(notCaughtUp(consumer({ cluster: undefined }), stream({ cluster: undefined }))).toBeNull();
  });

  it('is not one with messages pending or unacknowledged', () => {
    expect(notCaughtUp(consumer({ num_pending: 3 }), stream())).toBe('3 pending and 0 unacknowledged');
    expect(notCaughtUp(consumer({ num_ack_pending: 1 }), stream())).toBe('0 pending and 1 unacknowledged');
  });

  it('is not one whose "nothing pending" comes from a leader whose copy of the stream is behind or offline', () => {
    const led = consumer({ cluster: cluster('n3', peer('n1'), peer('n2')) });
    expect(notCaughtUp(led, stream({ cluster: cluster('n1', peer('n2'), peer('n3', false)) }))).toBe(
      "the group's leader n3 holds no current copy of the stream",
    );
    expect(notCaughtUp(led, stream({ cluster: cluster('n1', peer('n2'), peer('n3', true, true)) }))).toBe(
      "the group's leader n3 holds no current copy of the stream",
    );
  });

  it('is not one while the group or the stream has no leader', () => {
    expect(notCaughtUp(consumer({ cluster: cluster(undefined, peer('n2')) }), stream())).toBe('the group has no leader');
    expect(notCaughtUp(consumer(), stream({ cluster: cluster(undefined, peer('n2')) }))).toBe('the stream has no leader');
  });
});
