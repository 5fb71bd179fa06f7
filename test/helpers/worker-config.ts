import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig, type Config } from '../../src/config.ts';
import type { TestDatabase } from './db.ts';

/** Worker settings for tests: exact backoff (no jitter), quick polls, mail to a temporary folder. */
export function workerConfig(db: Pick<TestDatabase, 'url'>, env: Record<string, string> = {}): Config {
  return loadConfig({
    DATABASE_URL: db.url,
    LOG_LEVEL: 'info',
    BACKOFF_JITTER: 'false',
    POLL_INTERVAL_MS: '50',
    MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
    ...env,
  });
}
