import type { ClaimedMessage } from '../claim.ts';

/*
 * The worker's local queue keeps the claim's priorities across claims (ADR 0033). The worker claims
 * ahead: while one batch of bulk work still waits in the local queue, the next claim may bring a
 * message of a higher priority (an order's confirmation), which would otherwise start only after
 * every message queued before it. A batch comes in priority order (higher first, claim order within: src/outbox/claim.ts), and the
 * queue is only ever built from such batches, so adding one is a stable merge: a message goes
 * behind every queued message of its priority or higher, and ahead of the lower ones.
 *
 * The common case, a batch no higher than the queue's tail (one priority in play), is an append.
 */
export function mergeByPriority(queue: ClaimedMessage[], batch: readonly ClaimedMessage[]): ClaimedMessage[] {
  if (batch.length === 0) return queue;
  if (queue.length === 0 || batch[0]!.priority <= queue[queue.length - 1]!.priority) {
    for (const m of batch) queue.push(m);
    return queue;
  }
  const out = new Array<ClaimedMessage>(queue.length + batch.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < queue.length && j < batch.length) out[k++] = batch[j]!.priority > queue[i]!.priority ? batch[j++]! : queue[i++]!;
  while (i < queue.length) out[k++] = queue[i++]!;
  while (j < batch.length) out[k++] = batch[j++]!;
  return out;
}
