import type { Config } from '../config.ts';
import { createDatabase, type Database } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import { createMailer } from '../mail/mailer.ts';
import type { TopicHandler } from '../messages/handler.ts';
import { HandlerRegistry } from '../outbox/index.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../search/postgres-search-index.ts';
import { createWebhookSender, type WebhookSender } from '../webhooks/delivery/sender.ts';
import { defaultHandlers, type HandlerDeps } from './handlers/index.ts';

/** What the worker process holds open while it runs: its pool, what its handlers use, and their registry. */
export interface WorkerResources {
  database: Database;
  registry: HandlerRegistry;
  /** Webhooks to hosts' systems: a sender loop of its own beside the outbox runner (src/webhooks/delivery/). */
  webhooks: WebhookSender;
  /** Closes the handlers (the events relay drains its NATS connection), the mailer, the search index and the pool. */
  close(): Promise<void>;
}

/** Opens what the handlers need and registers them; `extraHandlers` is the test entry's (test/helpers/worker-entry.ts). */
export function openWorkerResources(
  config: Config,
  logger: Logger,
  concurrency: number,
  extraHandlers?: (deps: HandlerDeps) => TopicHandler<any>[],
): WorkerResources {
  // Claims, settles and purges need connections besides the handlers that use the database.
  const database = createDatabase(config.DATABASE_URL, {
    max: Math.max(config.DB_POOL_MAX, concurrency + 2),
    applicationName: 'stayhub-worker',
    pooler: config.DATABASE_POOLER,
  });
  const mailer = createMailer(config);
  const searchIndex = createPostgresSearchIndex({ ...searchIndexOptions(config), applicationName: 'stayhub-worker-search' });
  const webhooks = createWebhookSender({ db: database.db, pool: database.pool, config, logger });
  const deps: HandlerDeps = { config, db: database.db, mailer, logger, searchIndex, webhooks };
  const registry = new HandlerRegistry([...defaultHandlers(deps), ...(extraHandlers?.(deps) ?? [])]);
  return {
    database,
    registry,
    webhooks,
    async close() {
      await registry.close(); // events relay: drains its NATS connection
      mailer.close();
      await searchIndex.close();
      await database.close();
    },
  };
}
