import type { ConsumerInfo, StreamInfo } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { notCaughtUp } from '../../../src/events/caught-up.ts';

/*
 * `consume:earnings --until-empty` exits once the group is caught up (src/events/caught-up.ts): the
 * count of what is pending is believed only from a whole cluster, since a wiped node elected
 * before it caught up counts nothing pending over a stream it does not hold yet.
 */

const peer = (name: string, current = true, offline = false) => ({ name, current, offline, active: 1_000_000, lag: 0 });
const whole = { name: 'c', leader: 'n1', replicas: [peer('n2'), peer('n3')] };
const consumer = (over: Partial<ConsumerInfo> = {}) =>
  ({ num_pending: 0, num_ack_pending: 0, cluster: whole, ...over }) as unknown as ConsumerInfo;
const stream = (over: Partial<StreamInfo> = {}) => ({ cluster: whole, ...over }) as unknown as StreamInfo;

describe('a consumer group caught up', () => {
  it('is one with nothing pending or unacknowledged, told by a whole cluster', () => {
    expect(notCaughtUp(consumer(), stream())).toBeNull();
  });

  it('is one with nothing pending on a single server (no cluster to doubt)', () => {
    expect(notCaughtUp(consumer({ cluster: undefined }), stream({ cluster: undefined }))).toBeNull();
  });

  it('is not one with messages pending or unacknowledged', () => {
    expect(notCaughtUp(consumer({ num_pending: 3 }), stream())).toBe('3 pending and 0 unacknowledged');
    expect(notCaughtUp(consumer({ num_ack_pending: 1 }), stream())).toBe('0 pending and 1 unacknowledged');
  });

  it('is not one whose "nothing pending" comes from a cluster with a replica behind, offline or no leader', () => {
    const behind = { ...whole, replicas: [peer('n2', false), peer('n3')] };
    expect(notCaughtUp(consumer({ cluster: behind }), stream())).toBe("the group's replicas n2 are not current");
    const offline = { ...whole, replicas: [peer('n2'), peer('n3', true, true)] };
    expect(notCaughtUp(consumer(), stream({ cluster: offline }))).toBe("the stream's replicas n3 are not current");
    expect(notCaughtUp(consumer(), stream({ cluster: { ...whole, leader: undefined } }))).toBe('the stream has no leader');
  });
});
