import type { BenchSection } from '../context.ts';
import { measureTracing, renderTracing } from '../tracing.ts';

/** What tracing costs the API and the drain: off, sampled at 0, every trace exported (tracing.ts). */
export const tracingSection: BenchSection = {
  name: 'tracing',
  markdown: [{ place: 9.1, render: renderTracing }],
  run: async (ctx) => ({ tracing: await measureTracing(ctx) }),
};
