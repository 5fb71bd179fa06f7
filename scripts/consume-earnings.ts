import { onParentGone } from '../src/process/lifeline.ts';
import { earningsMain } from '../src/events/earnings/main.ts';

// `npm run consume:earnings -- [flags]`: see src/events/earnings/main.ts for flags and exit codes.
// npm passes no SIGTERM on: when the npm that started us exits, stop as on SIGTERM (a graceful drain).
onParentGone(() => process.kill(process.pid, 'SIGTERM'), { name: 'consume:earnings' });
earningsMain({ argv: process.argv.slice(2) }).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`consume:earnings: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
