import { HandlerRegistry } from '../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../src/worker/outbox-worker.ts';
import type { TestDatabase } from './db.ts';
import { captureLogger } from './capture-logger.ts';
import { testHandler } from './test-handler.ts';
import { workerConfig } from './worker-config.ts';

/**
 * A worker whose one handler records a field of each payload of `topic` it handles, in order, on
 * `db`, with these settings over the tests' (a test's OUTBOX_WRITES and OUTBOX_SLOT, say). Not
 * started.
 */
export function recordingWorker(db: Pick<TestDatabase, 'db' | 'url'>, topic: string, field: string, env: Record<string, string> = {}) {
  const handled: string[] = [];
  const { logger } = captureLogger();
  const worker = createConfiguredWorker({
    db: db.db,
    config: workerConfig(db, env),
    registry: new HandlerRegistry([
      testHandler('record', topic, async ({ payload }) => {
        handled.push((payload as Record<string, string>)[field]!);
      }),
    ]),
    logger,
    housekeeping: false,
  });
  return { worker, handled };
}
