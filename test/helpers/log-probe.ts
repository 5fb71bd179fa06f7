import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/logger.ts';

/** Logs one line the way the API and the worker do (config → LOG_FORMAT → logger); see test/integration/logs/format.test.ts. */
const config = loadConfig();
const logger = createLogger(config.LOG_LEVEL, 'probe', { format: config.LOG_FORMAT });
logger.info({ answer: 42 }, 'hello from the probe');
