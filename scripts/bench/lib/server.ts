import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runMigrations } from '../../../src/db/migrate.ts';
import { registerOutboxHooks } from '../../../src/outbox/index.ts';
import { startThrowawayPostgres, withClient, type ThrowawayPostgres } from '../../lib/postgres.ts';
import { ROOT } from '../../lib/processes.ts';

/**
 * One embedded PostgreSQL for the whole bench, with the server's default settings (fsync on,
 * synchronous_commit on) but wal_level=logical: the numbers must be what a real deployment pays
 * for durability. Each
 * system gets its own database on this one server, so they share the same disk, WAL and CPUs.
 */
export interface BenchServer extends ThrowawayPostgres {
  /** A migrated, empty StayHub database to clone from. */
  ourTemplate: string;
}

export async function startServer(log: (msg: string) => void): Promise<BenchServer> {
  // wal_level=logical: what OUTBOX_WRITES=wal needs (ADR 0056), so its variants run as deployed.
  const server = await startThrowawayPostgres({ name: 'bench', log, settings: { wal_level: 'logical' } });
  const ourTemplate = 'stayhub_bench_template';
  registerOutboxHooks();
  await runMigrations(await server.createDatabase(ourTemplate));
  return { ...server, ourTemplate };
}

/** The settings that decide write-path numbers, as the server reports them. */
export async function postgresSettings(url: string): Promise<Record<string, string>> {
  const names = [
    'server_version',
    'fsync',
    'synchronous_commit',
    'full_page_writes',
    'wal_sync_method',
    'wal_level',
    'shared_buffers',
    'work_mem',
    'max_connections',
    'max_wal_size',
    'checkpoint_timeout',
    'autovacuum',
    'jit',
  ];
  const { rows } = await withClient(url, (c) =>
    c.query<{ name: string; setting: string }>(
      'select name, current_setting(name) as setting from pg_settings where name = any($1) order by name',
      [names],
    ),
  );
  return Object.fromEntries(rows.map((r) => [r.name, r.setting]));
}

function packageVersion(name: string): string {
  try {
    return (JSON.parse(readFileSync(path.join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export function machine() {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    loadAverageAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

export function versions(postgres: string, pgbench: string | null, natsServer: string | null) {
  return {
    node: process.version,
    postgres,
    pgbench,
    natsServer,
    graphileWorker: packageVersion('graphile-worker'),
    pgBoss: packageVersion('pg-boss'),
    autocannon: packageVersion('autocannon'),
    pg: packageVersion('pg'),
    fastify: packageVersion('fastify'),
  };
}
