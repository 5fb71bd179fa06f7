import { appendFileSync } from 'node:fs';
import { main } from '../../src/commands/drain-outbox.ts';
import type { TopicName } from '../../src/messages/topics.ts';
import type { TopicHandler } from '../../src/messages/handler.ts';

/*
 * TEST-ONLY entry point: the real worker (`main()` of src/commands/drain-outbox.ts, same flags,
 * signals and exit codes) with two extra handlers, so process-level tests can hold a handler in
 * flight. Production never loads this file; nothing in src/ knows these topics.
 *
 *   test.slow   handler 'test.slow-handler' sleeps TEST_SLOW_MS (default 1500)
 *   test.noop   handler 'test.noop-handler' does nothing
 *
 * Both append "<handler> <messageId> <start|end>" to TEST_EFFECTS_FILE when it is set, so a test
 * can count how many times each message's effect ran.
 */
const effects = process.env.TEST_EFFECTS_FILE;
const record = (line: string) => effects && appendFileSync(effects, `${line}\n`);

const testHandlers = (): TopicHandler<any>[] => [
  {
    name: 'test.slow-handler',
    topic: 'test.slow' as TopicName,
    async handle({ messageId, log }) {
      record(`test.slow-handler ${messageId} start`);
      log.info('test: slow handler started');
      await new Promise((r) => setTimeout(r, Number(process.env.TEST_SLOW_MS ?? 1500)));
      record(`test.slow-handler ${messageId} end`);
      log.info('test: slow handler finished');
    },
  },
  {
    name: 'test.noop-handler',
    topic: 'test.noop' as TopicName,
    async handle({ messageId }) {
      record(`test.noop-handler ${messageId} end`);
    },
  },
];

main({ argv: process.argv.slice(2), extraHandlers: testHandlers }).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`worker-entry: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
