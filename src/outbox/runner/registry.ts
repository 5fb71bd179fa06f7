import type { Logger } from '../../logger.ts';

/**
 * What a handler is given: the message's identity and its payload (validated, when the worker was
 * given the topic's schema: WorkerOptions.payloadSchemas). `P` and `T` are the application's: the
 * outbox knows topics only as strings and payloads only as JSON. A handler must be
 * safe to run twice for the same message (delivery is at-least-once): use the payload's
 * idempotencyKey downstream, make the effect naturally idempotent, or record what was done.
 */
export interface HandlerContext<P = unknown, T extends string = string> {
  /** The message's public id; for work moved into a handler's lane, still the original's. */
  messageId: string;
  topic: T;
  key: string | null;
  attempt: number;
  payload: P;
  log: Logger;
  /** Aborted when the worker must stop at once (second signal, shutdown timeout). */
  signal: AbortSignal;
  /** When the event was written (outbox.created_at); the events relay publishes it. */
  occurredAt: Date;
}

export interface Handler<P = unknown, T extends string = string> {
  /** Stable name: recorded per message in outbox.handlers_done, so renaming one re-runs it. */
  name: string;
  topic: T;
  handle(ctx: HandlerContext<P, T>): Promise<void>;
  /**
   * Order and retry this handler per (key, handler), not per message: its failure holds only its
   * own later work of the key, never the message's other handlers (src/outbox/lanes.ts). For a
   * handler whose downstream can be away for long (the events relay).
   */
  ownLane?: boolean;
  /** Optional set-up before the first message (the events relay checks its stream); a throw stops the worker's start. */
  prepare?(): Promise<void>;
  /** Optional tear-down when the worker stops. */
  close?(): Promise<void>;
}

/** Topic → its handlers. Built from an explicit list (the application's), never from import side effects. */
export class HandlerRegistry {
  private readonly byTopic = new Map<string, Handler[]>();

  constructor(handlers: readonly Handler<any, any>[] = []) {
    for (const h of handlers) this.register(h);
  }

  register<P, T extends string>(handler: Handler<P, T>): this {
    const list = this.byTopic.get(handler.topic) ?? [];
    if (list.some((h) => h.name === handler.name)) {
      throw new Error(`handler ${handler.name} is registered twice for ${handler.topic}`);
    }
    list.push(handler as unknown as Handler);
    this.byTopic.set(handler.topic, list);
    return this;
  }

  handlersFor(topic: string): Handler[] {
    return this.byTopic.get(topic) ?? [];
  }

  topics(): string[] {
    return [...this.byTopic.keys()].sort();
  }

  /** The names of the handlers that keep their own lane, for the claim (src/outbox/claim.ts). */
  ownLanes(): string[] {
    const names = new Set<string>();
    for (const h of [...this.byTopic.values()].flat()) if (h.ownLane) names.add(h.name);
    return [...names].sort();
  }

  /** Runs every handler's prepare() (events relay), one after the other. */
  async prepare(): Promise<void> {
    for (const h of [...this.byTopic.values()].flat()) await h.prepare?.();
  }

  /** Runs every handler's close(); a failure is logged by the handler, never thrown. */
  async close(): Promise<void> {
    for (const h of [...this.byTopic.values()].flat()) await h.close?.().catch(() => undefined);
  }
}
