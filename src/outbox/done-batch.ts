import { retryWrite } from './retry-write.ts';

interface Waiting<T> {
  item: T;
  resolve: (held: boolean) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit for DONE. Messages finished in the same turn of the event loop go into one UPDATE
 * (the write is scheduled with setImmediate, after every handler that finished in this turn has
 * reported), and at most one write is in flight: whatever finishes meanwhile goes into the next.
 * An idle worker adds no delay (the first finished message is written in the same turn), a busy
 * one writes hundreds of rows per statement, as graphile-worker's batched completion and pg-boss's
 * complete() do. Each (id, claim) still learns on its own whether it held its claim.
 *
 * A write that keeps failing (database unreachable for longer than retryWrite tries) rejects the
 * promise of each of its messages: they are not recorded, and their leases bring them back.
 */
export class DoneBatcher<T> {
  private queue: Waiting<T>[] = [];
  private writing = false;
  private scheduled = false;

  constructor(
    /** Marks the items DONE in one statement; per item, whether its claim was still held. */
    private readonly markDone: (items: readonly T[]) => Promise<boolean[]>,
    private readonly maxBatch = 1000,
  ) {}

  /** Resolves with whether the claim was still held (true: DONE under it), once written. */
  add(item: T): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (!this.scheduled && !this.writing) {
        this.scheduled = true;
        setImmediate(this.flush);
      }
    });
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.writing) return;
    void this.writeAll();
  };

  private async writeAll(): Promise<void> {
    this.writing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.length <= this.maxBatch ? this.queue : this.queue.slice(0, this.maxBatch);
        this.queue = batch === this.queue ? [] : this.queue.slice(this.maxBatch);
        const items = new Array<T>(batch.length);
        for (let i = 0; i < batch.length; i++) items[i] = batch[i]!.item;
        try {
          const held = await retryWrite(() => this.markDone(items));
          for (let i = 0; i < batch.length; i++) batch[i]!.resolve(held[i]!);
        } catch (err) {
          for (const w of batch) w.reject(err);
        }
      }
    } finally {
      this.writing = false;
    }
  }
}
