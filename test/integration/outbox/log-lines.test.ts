import { describe, expect, it } from 'vitest';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { insertMessage } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';

/*
 * What a person watching the worker sees at info: with logEachMessage (npm start in a terminal)
 * one line per message done; without it (JSON logs, production) none per message, only the
 * progress line once a minute, which a line per message would cost a busy worker a quarter of its
 * throughput to replace.
 */
const tdb = useTestDatabase('worker_log');

async function runOne(logEachMessage: boolean) {
  const { logger, entries } = captureLogger('info');
  const registry = new HandlerRegistry([testHandler('log.first', 'test.log'), testHandler('log.second', 'test.log')]);
  const worker = createConfiguredWorker({
    db: tdb.db,
    config: workerConfig(tdb),
    registry,
    logger,
    listen: false,
    housekeeping: false,
    logEachMessage,
  });
  const msg = await insertMessage(tdb.db, 'test.log');
  expect(await worker.runUntilEmpty()).toBe(1);
  await worker.stop();
  return { msg, lines: entries().filter((e) => e.messageId === msg.public_id) };
}

describe('worker log lines at info', () => {
  it('one line per message done when a person is watching', async () => {
    const { msg, lines } = await runOne(true);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 30, msg: 'test.log done', topic: 'test.log', messageId: msg.public_id, attempt: 1 });
  });

  it('none per message otherwise', async () => {
    const { lines } = await runOne(false);
    expect(lines).toEqual([]);
  });
});
