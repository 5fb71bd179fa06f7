import { stopWhenSupervisorDies } from '../src/lifecycle.ts';
import { earningsMain } from '../src/events/earnings/main.ts';

// `npm run consume:earnings -- [flags]`: see src/events/earnings/main.ts for flags and exit codes.
stopWhenSupervisorDies();
earningsMain({ argv: process.argv.slice(2) }).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`consume:earnings: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
