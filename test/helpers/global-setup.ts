import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, chmodSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { EmbeddedPostgres, ensureDatabase } from '../../src/db/embedded.ts';
import { runMigrations } from '../../src/db/migrate.ts';
import { registerOutboxHooks } from '../../src/outbox/index.ts';
import { lifelineEnv, onParentGone } from '../../src/process/lifeline.ts';
import { freePort } from '../../src/net/free-port.ts';
import { COMPILED_TREE_ENV } from '../../scripts/lib/processes.ts';
import { compileForTests } from './compiled-tree.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin URL of the test server (database `postgres`). */
    pgServerUrl: string;
    /** The migrated template this run's test databases are cloned from. */
    templateDb: string;
  }
}

const repoRoot = path.resolve(import.meta.dirname, '../..');

/**
 * Untracked and ignored paths inside the repository (file by file), or undefined outside a git
 * checkout. Compared before and after the run: a test must write to temporary folders only.
 */
function repoWrites(): Set<string> | undefined {
  try {
    const out = execFileSync(
      'git',
      ['status', '--porcelain', '--ignored', '--untracked-files=all', '-z', '--', '.', ':(exclude)node_modules'],
      {
        cwd: repoRoot,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    // node_modules is the tools' own (vitest keeps its results cache in node_modules/.vite), not a test's.
    return new Set(
      out
        .split('\0')
        .filter((l) => l.startsWith('?? ') || l.startsWith('!! '))
        .map((l) => l.slice(3))
        .filter((f) => !f.startsWith('node_modules')),
    );
  } catch {
    return undefined;
  }
}

/**
 * Starts a throw-away PostgreSQL for this run (or uses TEST_DATABASE_URL's server), migrates a
 * template database once, and hands its address to the test files. Each run gets its own
 * folder and port, and its own template name (also on a shared TEST_DATABASE_URL server), so two
 * runs on one machine never meet. At the end the run fails if a test left files in the repository.
 */
export default async function setup(project: TestProject) {
  // Inherited by the test workers, and by every process a test starts with their environment: if
  // this run is SIGKILLed or its time limit stops only it, they stop as on SIGTERM instead of
  // running on, orphaned. The test server below has a watchdog of its own (src/db/embedded.ts).
  Object.assign(process.env, lifelineEnv());
  // `npm test` stopped by a SIGTERM to npm alone (a CI time limit): npm exits and passes nothing
  // on, and this run would go on to the end. Stop it as a Ctrl-C would; what the tests started
  // then sees this process go (above).
  onParentGone(() => process.kill(process.pid, 'SIGTERM'), { name: 'vitest' });
  const filesBefore = repoWrites();
  // Compiled while the test server starts; inherited, like the lifeline, by what the tests start.
  // Not in watch mode: a tree compiled once would go stale as the source changes under it.
  const compiling = project.globalConfig.watch ? undefined : compileForTests();
  compiling?.catch(() => undefined); // awaited below, after the server: a failure is thrown there
  const templateDb = `stayhub_template_${randomBytes(4).toString('hex')}`;
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

  await ensureDatabase(serverUrl, templateDb);
  const templateUrl = new URL(serverUrl);
  templateUrl.pathname = `/${templateDb}`;
  registerOutboxHooks(); // the template's days ahead, as `npm run migrate` makes them
  await runMigrations(templateUrl.toString());

  const compiled = await compiling;
  if (compiled) process.env[COMPILED_TREE_ENV] = compiled.tree;

  project.provide('pgServerUrl', serverUrl);
  project.provide('templateDb', templateDb);

  return async () => {
    if (server) {
      await server.stop();
    } else {
      // A shared server keeps only what other runs own.
      const admin = new pg.Client({ connectionString: serverUrl });
      await admin.connect();
      await admin.query(`drop database if exists ${templateDb}`).finally(() => admin.end());
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
    compiled?.remove();
    const filesAfter = repoWrites();
    if (filesBefore && filesAfter) {
      const written = [...filesAfter].filter((f) => !filesBefore.has(f));
      if (written.length) {
        // A teardown error is printed but does not change vitest's exit code: set it too.
        process.exitCode = 1;
        throw new Error(`the test run wrote into the repository (tests must use temporary folders): ${written.slice(0, 20).join(', ')}`);
      }
    }
  };
}
