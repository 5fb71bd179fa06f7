import pino from 'pino';
import type { Logger } from '../../src/logger.ts';
import { LogCapture } from './app.ts';

/** A logger whose lines the test can read (`logs.lines`, JSON). */
export function captureLogger(level = 'info'): { logger: Logger; logs: LogCapture; entries: () => Record<string, unknown>[] } {
  const logs = new LogCapture();
  const logger = pino({ level }, logs);
  return { logger, logs, entries: () => logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}
