import { setTimeout as sleep } from 'node:timers/promises';
import { runCommand } from '../../src/process/run-main.ts';

/*
 * TEST-ONLY entry point: a long-running command whose graceful stop takes SLOW_STOP_MS (default
 * 2000), so a second notice (a second signal, or the lifeline seeing its parent go) lands while it
 * is still stopping. Every real entry point stops through the same helper.
 */
void runCommand(
  {
    name: 'slow-stop',
    usage: 'usage: (test only)',
    longRunning: true,
    async run({ logger, stopRequested }) {
      // A real entry's server or pool keeps the process alive; this one has only this timer.
      const alive = setInterval(() => undefined, 60_000);
      logger.info('slow-stop running');
      const reason = await stopRequested;
      logger.info({ reason }, 'slow-stop stopping');
      await sleep(Number(process.env.SLOW_STOP_MS ?? 2000));
      logger.info('slow-stop stopped');
      clearInterval(alive);
      return 0;
    },
  },
  { argv: [] },
).then((code) => {
  process.exitCode = code;
});
