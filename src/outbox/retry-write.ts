import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelaySeconds } from './backoff.ts';

const RETRY_BACKOFF = { baseSeconds: 0.2, maxSeconds: 1.6 };

/**
 * A worker write that must not be lost to a blip (an outcome, a handler's success): tried up to
 * five times, 0.2, 0.4, 0.8 and 1.6 s apart (3 s of waiting), then the last error is thrown. If the
 * database stays unreachable the outcome is not recorded, the lease runs out and the message is
 * delivered again: at-least-once, never lost. Short and fixed, unlike a message's backoff
 * (src/outbox/backoff.ts): the message is still leased to us, and the lease is the deadline.
 */
export async function retryWrite<T>(write: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await write();
    } catch (err) {
      if (i >= attempts - 1) throw err;
      await sleep(backoffDelaySeconds(i + 1, RETRY_BACKOFF) * 1000);
    }
  }
}
