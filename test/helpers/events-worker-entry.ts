import { appendFileSync } from 'node:fs';
import { createJetStreamPublisher, type EventPublisher } from '../../src/events/publisher.ts';
import { main } from '../../src/commands/drain-outbox.ts';
import { eventsRelayHandlers } from '../../src/worker/handlers/events-relay.ts';

/*
 * TEST-ONLY entry point: the real worker (`main()`) whose events relay publishes through the real
 * JetStream publisher, wrapped so a test can see each PubAck and kill the process at the worst
 * moment: after the server stored an event, before the worker recorded the message DONE.
 *
 *   TEST_NATS_URL            the relay's server (NATS_URL itself stays unset, so the production
 *                            list does not register a second relay)
 *   TEST_EFFECTS_FILE        gets "published <messageId> <seq> <duplicate>" per PubAck
 *   TEST_KILL_AFTER_PUBLISHES  SIGKILL this process right after that many PubAcks
 */
const effects = process.env.TEST_EFFECTS_FILE;
const killAfter = Number(process.env.TEST_KILL_AFTER_PUBLISHES ?? 0);
let acks = 0;

function watched(inner: EventPublisher): EventPublisher {
  return {
    prepare: () => inner.prepare(),
    close: () => inner.close(),
    async publish(event) {
      const result = await inner.publish(event);
      if (effects) appendFileSync(effects, `published ${event.messageId} ${result.seq} ${result.duplicate}\n`);
      if (killAfter && ++acks >= killAfter) process.kill(process.pid, 'SIGKILL');
      return result;
    },
  };
}

main({
  argv: process.argv.slice(2),
  extraHandlers: (deps) => {
    const config = { ...deps.config, NATS_URL: process.env.TEST_NATS_URL };
    return eventsRelayHandlers({ ...deps, config }, watched(createJetStreamPublisher(config, deps.logger)));
  },
}).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`events-worker-entry: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
