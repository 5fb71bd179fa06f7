import { HANDLER_CATALOGUE } from '../worker/handlers/catalogue.ts';

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
 * the app is built: `workerCatalogue()` below, unless the app is given another (tests).
 */
export class HandlerCatalogue {
  private readonly byTopic = new Map<string, string[]>();

  /**
   * @param handlers the worker's subscriptions
   * @param topicsWithUnnamedHandlers topics known to be handled whose handler names are not known here
   */
  constructor(handlers: readonly HandlerInfo[], topicsWithUnnamedHandlers: readonly string[] = []) {
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
 * The worker's real subscriptions, from the static list beside its handler registry
 * (src/worker/handlers/catalogue.ts): names and topics only, so the API never builds a handler nor
 * imports what handlers use. Built once, at import; every caller shares it.
 *
 * The API and the worker are deployed together from this tree; during a rolling deploy the API's
 * view can briefly differ from the running worker's.
 */
const WORKER_CATALOGUE = new HandlerCatalogue(HANDLER_CATALOGUE);

export function workerCatalogue(): HandlerCatalogue {
  return WORKER_CATALOGUE;
}
