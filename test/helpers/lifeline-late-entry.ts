import { existsSync } from 'node:fs';

/*
 * TEST-ONLY: lifeline-entry.ts, loaded only once the file LIFELINE_GO_FILE exists: a start-up slow
 * enough (node, tsx, the modules) for npm to be killed before the lifeline is armed.
 */
process.stdout.write('starting\n');
while (!existsSync(process.env.LIFELINE_GO_FILE!)) await new Promise((r) => setTimeout(r, 20));
await import('./lifeline-entry.ts');
