import { createDatabase } from '../db/client.ts';
import { requireWalSlot, setOutboxWrites } from '../outbox/index.ts';
import { refuseUndeclaredTransactionPooler } from '../db/pooler-probe.ts';
import { createDirectIndexer } from '../search/direct-index.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../search/postgres-search-index.ts';
import { buildApp } from '../http/app.ts';
import { runMain, type Command } from '../process/run-main.ts';

/*
 * `npm run api`: the API process. Builds the app and listens; on SIGTERM/SIGINT (or when the npm
 * that started it goes away) it stops taking requests, lets those in flight finish, then closes
 * its pools. A second signal or SHUTDOWN_TIMEOUT_SECONDS exits at once (src/process/run-main.ts).
 */
const USAGE = `usage: npm run api

Serves the HTTP API on HOST:PORT (see .env.example). Exit codes: 0 clean stop · 1 a forced stop or
a failure at start · 2 bad configuration.`;

/** Connections the kernel may hold for the API before it accepts them. */
const LISTEN_BACKLOG = 4096;

export const apiCommand: Command = {
  name: 'api',
  usage: USAGE,
  longRunning: true,
  async run({ config, logger, stopRequested }) {
    // Named statements need the session DATABASE_POOLER promises (src/db/pooler-probe.ts).
    await refuseUndeclaredTransactionPooler({
      process: 'the API',
      connectionString: config.DATABASE_URL,
      pooler: config.DATABASE_POOLER,
      fix: 'Set DATABASE_POOLER=transaction, or connect the API to PostgreSQL directly',
      log: logger,
    });
    const db = createDatabase(config.DATABASE_URL, {
      max: config.DB_POOL_MAX,
      applicationName: 'stayhub-api',
      pooler: config.DATABASE_POOLER,
    });
    // OUTBOX_WRITES=wal: messages go to the WAL only while a slot keeps them (src/outbox/wal-messages.ts).
    if (config.OUTBOX_WRITES === 'wal') {
      try {
        await requireWalSlot(db.db, config.OUTBOX_SLOT);
      } catch (e) {
        await db.close();
        throw e;
      }
      setOutboxWrites('wal');
    }
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
    try {
      // A burst of new connections waits in the kernel's accept queue: Node's default of 511 let a
      // thousand clients connecting at once lose SYNs and retry seconds later, before they could
      // even be refused (ADR 0034). The kernel caps it at net.core.somaxconn.
      await app.listen({ port: config.PORT, host: config.HOST, backlog: LISTEN_BACKLOG });
    } catch (e) {
      await app.close();
      throw e;
    }
    await stopRequested;
    logger.info('shutting down');
    await app.close();
    return 0;
  },
};

runMain(apiCommand, import.meta.url);
