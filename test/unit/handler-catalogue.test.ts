import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HANDLER_CATALOGUE } from '../../src/messages/catalogue.ts';
import { SUBSCRIPTIONS } from '../../src/messages/subscriptions.ts';
import { defaultHandlers, type HandlerDeps } from '../../src/worker/handlers/index.ts';

describe('the subscriptions: one list for the worker and the API', () => {
  it('the worker registers exactly the subscriptions (names, topics, order)', () => {
    // Building a handler only captures its dependencies; nothing is called here. Without
    // NATS_URL: the events relay is added per worker from its own config, so the static list holds
    // the handlers every worker runs.
    const handlers = defaultHandlers({ config: {} } as HandlerDeps);
    expect(SUBSCRIPTIONS.map((h) => ({ name: h.name, topic: h.topic }))).toEqual(handlers.map((h) => ({ name: h.name, topic: h.topic })));
  });

  it('answers per topic', () => {
    expect(HANDLER_CATALOGUE.handlersFor('booking.cancelled')).toEqual([
      'email.guest-cancellation',
      'email.host-cancellation',
      'webhooks.booking-cancelled',
    ]);
    expect(HANDLER_CATALOGUE.topics()).toEqual(['booking.cancelled', 'booking.created', 'property.changed', 'webhook.endpoint-disabled']);
  });

  it('pulls nothing of the handlers into the API: the list imports only a type', () => {
    const imports = [
      ...readFileSync(new URL('../../src/messages/subscriptions.ts', import.meta.url), 'utf8').matchAll(
        /^import\s+(type\s+)?[^;]*?from\s+'([^']+)'/gm,
      ),
    ];
    expect(imports.every((m) => Boolean(m[1]))).toBe(true);
  });
});
