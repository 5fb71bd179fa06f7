import { earningsMain } from '../../src/commands/consume-earnings.ts';

/*
 * TEST-ONLY entry point: the real earnings consumer (`earningsMain`, same flags and exit codes)
 * that SIGKILLs itself inside the transaction of its TEST_KILL_IN_TX_AFTER-th applied event: after
 * the ledger increment and the inbox row were written, before COMMIT; or, with
 * TEST_KILL_BEFORE_ACK_AFTER, after the COMMIT of that many events and before the ack.
 */
const killAfter = Number(process.env.TEST_KILL_IN_TX_AFTER ?? 0);
let effects = 0;
const killBeforeAck = Number(process.env.TEST_KILL_BEFORE_ACK_AFTER ?? 0);
let commits = 0;

earningsMain({
  argv: process.argv.slice(2),
  afterEffect: (event) => {
    if (killAfter && ++effects >= killAfter) {
      process.stdout.write(`killing inside the transaction of ${event.messageId}\n`);
      process.kill(process.pid, 'SIGKILL');
    }
  },
  beforeAck: (event) => {
    if (killBeforeAck && ++commits >= killBeforeAck) {
      process.stdout.write(`killing before the ack of ${event.messageId}\n`);
      process.kill(process.pid, 'SIGKILL');
    }
  },
}).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`earnings-entry: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
