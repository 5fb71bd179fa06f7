import { onParentGone } from '../../src/process/lifeline.ts';

/*
 * TEST-ONLY: a long-running process with nothing but the lifeline. On the parent's death it prints
 * "stopping" and exits 0 a moment later, as a drained entry point would.
 */
onParentGone(
  () => {
    process.stdout.write('stopping\n');
    setTimeout(() => process.exit(0), 50);
  },
  { name: 'fixture' },
);
setInterval(() => {}, 1000);
process.stdout.write('ready\n');
