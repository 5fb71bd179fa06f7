import { JetStreamApiError } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { natsAway, refused } from '../../src/events/publish-failures.ts';

/*
 * What a failed publish means to the relay: a JetStream 503 ("temporarily unavailable", a cluster
 * without a leader for a moment) is NATS away, so the event waits without spending an attempt;
 * any other JetStream answer is the server refusing this event.
 */

describe('a failed publish', () => {
  it('is NATS away when JetStream answers 503 "temporarily unavailable"', () => {
    const err = new JetStreamApiError({ code: 503, err_code: 10008, description: 'JetStream system temporarily unavailable' });
    expect(natsAway(err)).toBe(true);
    expect(refused(err)).toBe(false);
  });

  it('is NATS away when JetStream has no peers to place the stream on (a cluster a node short)', () => {
    const err = new JetStreamApiError({ code: 400, err_code: 10005, description: 'no suitable peers for placement' });
    expect(natsAway(err)).toBe(true);
    expect(refused(err)).toBe(false);
  });

  it('is a refusal of this event for any other JetStream answer', () => {
    const err = new JetStreamApiError({ code: 400, err_code: 10054, description: 'maximum messages exceeded' });
    expect(refused(err)).toBe(true);
    expect(natsAway(err)).toBe(false);
  });
});
