import closeWithGrace from 'close-with-grace';
import { loadConfig } from '../config.ts';
import { createDatabase } from '../db/client.ts';
import { createLogger } from '../logger.ts';
import { createDirectIndexer } from '../search/direct-index.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../search/postgres-search-index.ts';
import { buildApp } from './app.ts';
import { onParentGone, sigtermSelfUnless } from '../process/lifeline.ts';

/**
 * The API process: builds the app, listens, and on SIGTERM/SIGINT stops taking requests, lets
 * those in flight finish, then closes the pool. A second signal or the timeout exits at once.
 * The same happens when the npm that started it exits (src/process/lifeline.ts).
 */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'api', { format: config.LOG_FORMAT });
  const db = createDatabase(config.DATABASE_URL, { max: config.DB_POOL_MAX, applicationName: 'stayhub-api' });
  // The search index on its own pool, shared by GET /search and the direct write after a save.
  const searchIndex = createPostgresSearchIndex({ ...searchIndexOptions(config), applicationName: 'stayhub-api-search' });
  const direct = createDirectIndexer({
    db: db.db,
    searchIndex,
    log: logger.child({ component: 'search-direct' }),
    timeoutMs: config.SEARCH_DIRECT_TIMEOUT_MS,
  });
  const app = await buildApp({ config, logger, db, searchIndex, afterPropertyCommit: direct.afterPropertyCommit });
  // Keep-alive: `server.close()` closes the connections idle at that moment and then waits for the
  // others, and a client that just got its in-flight answer keeps its socket open (undici: for the
  // server's 72 s keep-alive hint). So while closing, answers say `Connection: close`, and sockets
  // that turn idle are closed as they do; otherwise the close waits out SHUTDOWN_TIMEOUT_SECONDS
  // and exits 1 although every request was answered.
  let closingIdle: NodeJS.Timeout | undefined;
  app.addHook('preClose', async () => {
    closingIdle = setInterval(() => app.server.closeIdleConnections(), 100).unref();
  });
  app.addHook('onSend', async (_request, reply) => {
    if (closingIdle) reply.header('connection', 'close');
  });
  app.addHook('onClose', async () => {
    clearInterval(closingIdle);
    await direct.drain(); // direct index writes still running in the background use both pools
    await searchIndex.close();
    await db.close();
  });

  let stopping = false;
  closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_SECONDS * 1000, logger }, async ({ signal, err }) => {
    stopping = true;
    if (err) logger.error({ err }, 'shutting down after an error');
    else logger.info({ signal }, 'shutting down');
    await app.close();
  });

  // Started by npm (or `npm start`) and it went away: the same graceful close as SIGTERM.
  onParentGone(sigtermSelfUnless(() => stopping), { name: 'api' });
  await app.listen({ port: config.PORT, host: config.HOST });
}

main().catch((err) => {
  // eslint-disable-next-line no-console
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
