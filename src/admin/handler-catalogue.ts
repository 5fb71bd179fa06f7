import { TOPIC_NAMES } from '../outbox/topics.ts';
import { defaultHandlers, type HandlerDeps } from '../worker/handlers/index.ts';

/** One subscription of the worker: a handler name and the topic it handles. */
export interface HandlerInfo {
  name: string;
  topic: string;
}

/**
 * What the admin side knows about the worker's handlers: which topics have at least one handler
 * (a pending message of any other topic is an "unknown topic" the worker leaves alone) and the
 * handler names per topic (for the per-handler state of a message, next to `handlers_done`).
 *
 * The API does not run the worker, so it cannot ask a live registry; it is handed this list when
 * the app is built. See `defaultHandlerCatalogue` for where the list comes from.
 */
export class HandlerCatalogue {
  private readonly byTopic = new Map<string, string[]>();

  /**
   * @param handlers the worker's subscriptions
   * @param topicsWithUnnamedHandlers topics known to be handled whose handler names are not known here
   */
  constructor(handlers: HandlerInfo[], topicsWithUnnamedHandlers: readonly string[] = []) {
    for (const topic of topicsWithUnnamedHandlers) this.byTopic.set(topic, this.byTopic.get(topic) ?? []);
    for (const h of handlers) this.byTopic.set(h.topic, [...(this.byTopic.get(h.topic) ?? []), h.name]);
  }

  /** Handler names for a topic, as far as they are known; empty for a topic nobody handles. */
  handlersFor(topic: string): string[] {
    return this.byTopic.get(topic) ?? [];
  }

  isHandled(topic: string): boolean {
    return this.byTopic.has(topic);
  }

  /** Topics with at least one handler, sorted. */
  topics(): string[] {
    return [...this.byTopic.keys()].sort();
  }
}

/**
 * The catalogue used when the app is not given one. Until the worker's registry
 * (src/worker/handlers/index.ts) can be read without building its dependencies, every topic of
 * the API↔worker contract (src/outbox/topics.ts) counts as handled, with its handler names unknown.
 */
export function contractCatalogue(): HandlerCatalogue {
  return new HandlerCatalogue([], TOPIC_NAMES);
}

/**
 * The worker's real subscriptions, read from its explicit handler list
 * (src/worker/handlers/index.ts). Building a handler only captures its dependencies — they are
 * used when it handles a message — so the list is built here with dependencies that refuse to be
 * touched, and only names and topics are kept. Should a handler ever use a dependency while being
 * built, this falls back to the topic contract and says so, rather than stopping the API.
 *
 * The API and the worker are deployed together from this tree; during a rolling deploy the API's
 * view can briefly differ from the running worker's.
 */
export function workerCatalogue(onFallback?: (err: unknown) => void): HandlerCatalogue {
  const refusing = (name: string) =>
    new Proxy(
      {},
      {
        get(_target, prop) {
          throw new Error(`handler dependency ${name}.${String(prop)} used while building the handler list`);
        },
      },
    );
  const deps = {
    config: refusing('config'),
    db: refusing('db'),
    mailer: refusing('mailer'),
    logger: refusing('logger'),
    searchIndex: refusing('searchIndex'),
  } as unknown as HandlerDeps;
  try {
    const handlers = defaultHandlers(deps);
    return new HandlerCatalogue(handlers.map((h) => ({ name: h.name, topic: h.topic })));
  } catch (err) {
    onFallback?.(err);
    return contractCatalogue();
  }
}
