import { runMain } from '../process/run-main.ts';
import { reconcileCommand } from '../events/reconcile.ts';

/* `npm run events:reconcile -- --since T`: the command is src/events/reconcile.ts. */
export { reconcileCommand };

runMain(reconcileCommand, import.meta.url);
