import { PREPARED_CONNECTIONS, type BenchContext, type BenchSection } from '../context.ts';
import type { BenchResults } from '../results.ts';
import { renderTracing, tracingSection as measureTracing } from '../tracing.ts';

/** What tracing costs the API and the drain: off, sampled at 0, every trace exported (tracing.ts). */
export const tracingSection: BenchSection = {
  name: 'tracing',
  markdown: [{ place: 9.1, render: tracingMarkdown }],
  async run({ P, server, log }: BenchContext) {
    return {
      tracing: await measureTracing({
        runs: P.runs,
        connections: PREPARED_CONNECTIONS,
        httpSeconds: P.httpSeconds,
        drainMessages: P.drainMessages,
        sizes: { guests: P.apiGuests, properties: P.apiProperties },
        logDir: server.dir,
        freshDatabase: (name) => server.createDatabase(name, server.ourTemplate),
        log,
      }),
    };
  },
};

function tracingMarkdown(r: BenchResults): string[] {
  return r.tracing ? renderTracing(r.tracing) : [];
}
