/**
 * What a queue gives back: claimed rows it will not start (at shutdown, with too little of their
 * lease left, their endpoint disabled), and what it does with the answer.
 */
export interface GiveBack<T> {
  /** The fenced hand-back write (src/outbox/lease/leased-table.ts); resolves to how many rows went back. */
  write(items: readonly T[]): Promise<number>;
  /** The batch is back (`n` of its rows still held by this claim). */
  done?(items: readonly T[], n: number): void;
  /** The write failed: the rows come back when their lease ends; handing back only saves the wait. */
  failed(err: unknown, items: readonly T[]): void;
  /** A batch was written (or failed): a loop waiting on the queue may look again. */
  finished?(): void;
}

/**
 * Hand-backs run one batch after another, off the caller's path: a failure costs only the wait for
 * the lease's end. The outbox's worker and the webhook sender both give back through one of these;
 * a graceful stop waits for `settled` so nothing it claimed is left to its lease.
 */
export class HandBacks<T> {
  private chain: Promise<void> = Promise.resolve();
  private inFlight = 0;

  constructor(private readonly giveBack: GiveBack<T>) {}

  /** Batches queued or being written. */
  get pending(): number {
    return this.inFlight;
  }

  /** Resolves once every batch queued so far is written (or failed). */
  get settled(): Promise<void> {
    return this.chain;
  }

  later(items: readonly T[]): void {
    if (items.length === 0) return;
    this.inFlight++;
    this.chain = this.chain
      .then(() => this.write(items))
      .finally(() => {
        this.inFlight--;
        this.giveBack.finished?.();
      });
  }

  private async write(items: readonly T[]): Promise<void> {
    let n: number;
    try {
      n = await this.giveBack.write(items);
    } catch (err) {
      this.giveBack.failed(err, items);
      return;
    }
    this.giveBack.done?.(items, n);
  }
}
