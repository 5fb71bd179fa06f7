/**
 * Lookups over the application's subscriptions (which handler, by its stable name, handles which
 * topic), given as plain data: which topics have at least one handler (a pending message
 * of any other topic is an "unknown topic" the worker leaves alone) and the handler names per topic
 * (for the per-handler state of a message, next to `handlers_done`).
 *
 * The application builds it from its list, so the API can know which topics are handled and by
 * whom without building a handler. The API and the worker are deployed together; during a rolling
 * deploy the API's view can briefly differ from the running worker's.
 */
export class HandlerCatalogue {
  private readonly byTopic = new Map<string, string[]>();

  constructor(subscriptions: readonly { name: string; topic: string }[]) {
    for (const s of subscriptions) this.byTopic.set(s.topic, [...(this.byTopic.get(s.topic) ?? []), s.name]);
  }

  /** Handler names for a topic; empty for a topic nobody handles. */
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
