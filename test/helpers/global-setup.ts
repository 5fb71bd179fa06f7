import { mkdtempSync, chmodSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { EmbeddedPostgres, ensureDatabase } from '../../src/db/embedded.ts';
import { runMigrations } from '../../src/db/migrate.ts';
import { freePort } from '../../src/net/free-port.ts';

export const TEMPLATE_DB = 'stayhub_template';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin URL of the test server (database `postgres`). */
    pgServerUrl: string;
  }
}


/**
 * Starts a throw-away PostgreSQL for this run (or uses TEST_DATABASE_URL's server), migrates a
 * template database once, and hands its address to the test files. Each run gets its own
 * folder and port, so two runs on one machine never meet.
 */
export default async function setup(project: TestProject) {
  let serverUrl = process.env.TEST_DATABASE_URL;
  let server: EmbeddedPostgres | undefined;
  let dir: string | undefined;
  if (!serverUrl) {
    dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-test-pg-'));
    chmodSync(dir, 0o755); // the `postgres` user must reach the data folder
    server = new EmbeddedPostgres({
      dataDir: path.join(dir, 'data'),
      port: await freePort(),
      user: 'postgres',
      password: 'test',
      // Durability buys nothing in a throw-away cluster; speed does.
      settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
    });
    await server.initialise();
    await server.start();
    serverUrl = server.url;
  }

  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`drop database if exists ${TEMPLATE_DB}`);
  await admin.end();
  await ensureDatabase(serverUrl, TEMPLATE_DB);
  const templateUrl = new URL(serverUrl);
  templateUrl.pathname = `/${TEMPLATE_DB}`;
  await runMigrations(templateUrl.toString());

  project.provide('pgServerUrl', serverUrl);

  return async () => {
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  };
}
