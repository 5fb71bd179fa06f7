import type { BenchContext, BenchSection } from '../context.ts';
import { OVERLOAD_SETUP, overloadSection as measureOverload, renderOverload } from '../overload.ts';
import type { BenchResults } from '../results.ts';

/** Half the clients booking, half searching, with and without load shedding (overload.ts). */
export const overloadSection: BenchSection = {
  name: 'overload',
  async run({ smoke, server, log, results }: BenchContext) {
    results.setup.overload = OVERLOAD_SETUP;
    const freshDb = (name: string) => server.createDatabase(name, server.ourTemplate);
    return { overload: await measureOverload({ smoke, freshDb, logDir: server.dir, log }) };
  },
};

export const overloadMarkdown = (r: BenchResults): string[] => (r.overload ? renderOverload(r.overload) : []);
