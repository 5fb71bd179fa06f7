import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { workerCatalogue } from '../../src/admin/handler-catalogue.ts';
import { HANDLER_CATALOGUE } from '../../src/worker/handlers/catalogue.ts';
import { defaultHandlers, type HandlerDeps } from '../../src/worker/handlers/index.ts';

describe("the API's handler catalogue", () => {
  it('lists exactly the handlers the worker registers (names, topics, order)', () => {
    // Building a handler only captures its dependencies; nothing is called here.
    // Without NATS_URL: the events relay is registered per worker from its own config, so the
    // static list holds the handlers every worker runs.
    const handlers = defaultHandlers({ config: {} } as HandlerDeps);
    expect(HANDLER_CATALOGUE.map((h) => ({ name: h.name, topic: h.topic }))).toEqual(
      handlers.map((h) => ({ name: h.name, topic: h.topic })),
    );
  });

  it('is built once and answers per topic', () => {
    const c = workerCatalogue();
    expect(workerCatalogue()).toBe(c);
    expect(c.handlersFor('booking.cancelled')).toEqual(['email.guest-cancellation', 'email.host-cancellation']);
    expect(c.topics()).toEqual(['booking.cancelled', 'booking.created', 'property.changed']);
  });

  it('pulls nothing of the handlers into the API: the list imports only a type, the catalogue only the list', () => {
    const imports = (file: string) =>
      [...readFileSync(new URL(file, import.meta.url), 'utf8').matchAll(/^import\s+(type\s+)?[^;]*?from\s+'([^']+)'/gm)].map((m) => ({
        typeOnly: Boolean(m[1]),
        from: m[2],
      }));
    expect(imports('../../src/worker/handlers/catalogue.ts').every((i) => i.typeOnly)).toBe(true);
    expect(imports('../../src/admin/handler-catalogue.ts').filter((i) => !i.typeOnly).map((i) => i.from)).toEqual([
      '../worker/handlers/catalogue.ts',
    ]);
  });
});
