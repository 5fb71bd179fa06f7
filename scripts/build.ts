import { spawn } from 'node:child_process';
import { cpSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runMain, type Command } from '../src/process/run-main.ts';

/*
 * `npm run build [-- --out-dir DIR]`: the JavaScript the production image runs, in dist/ (or DIR):
 * tsc with tsconfig.build.json (type-checked, `.ts` imports rewritten to `.js`), then the files the
 * code reads at run time beside it, at the same relative places as in the source tree:
 * migrations/ (src/db/migrate.ts), src/outbox/migrations/ (src/outbox/migrate.ts) and public/ (the
 * admin dashboard, src/http/routes/admin.ts).
 * The result runs with plain node: `node dist/src/commands/api.js`, `node dist/src/commands/drain-outbox.js`,
 * `node dist/src/commands/migrate.js`, `node dist/src/commands/start.js`,
 * `node dist/src/commands/consume-earnings.js`.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

export interface CompileOptions {
  outDir: string;
  /** false: emit only (`--noCheck`), for a tree whose types `npm run typecheck` checks anyway. */
  typeCheck?: boolean;
  /** Entries outside src/ compiled beside it, from the repository root (the test run's workers with extra handlers). */
  alsoCompile?: readonly string[];
}

/**
 * tsc with tsconfig.build.json (src/) into `outDir`, emptied first (no stale file of a deleted
 * module survives), then the files the code reads at run time beside the JavaScript. Returns
 * tsc's exit code.
 */
export async function compileTree({ outDir, typeCheck = true, alsoCompile = [] }: CompileOptions): Promise<number> {
  rmSync(outDir, { recursive: true, force: true });
  let project = path.join(root, 'tsconfig.build.json');
  if (alsoCompile.length > 0) {
    // The build's own settings with a longer list of inputs: a project file of its own, beside the tree.
    project = `${outDir}.tsconfig.json`;
    const include = ['src', ...alsoCompile].map((entry) => path.join(root, entry));
    // Types are looked up from the project file's folder: pointed back at the checkout's.
    const compilerOptions = { typeRoots: [path.join(root, 'node_modules', '@types')] };
    writeFileSync(project, JSON.stringify({ extends: path.join(root, 'tsconfig.build.json'), compilerOptions, include }));
  }
  const args = [tsc, '-p', project, '--outDir', outDir, ...(typeCheck ? [] : ['--noCheck'])];
  const compiled = spawn(process.execPath, args, { stdio: 'inherit' });
  const status = await new Promise<number>((resolve, reject) => {
    compiled.once('error', reject);
    compiled.once('exit', (code) => resolve(code ?? 1));
  });
  if (status !== 0) return status;
  for (const dir of ['migrations', 'src/outbox/migrations', 'public'])
    cpSync(path.join(root, dir), path.join(outDir, dir), { recursive: true });
  return 0;
}

export const buildCommand: Command = {
  name: 'build',
  usage: `usage: npm run build [-- --out-dir DIR]

  --out-dir DIR   where the JavaScript goes (default dist)`,
  options: { 'out-dir': { type: 'string', default: 'dist' } },
  async run({ flags, out, err }) {
    const outDir = path.resolve(root, String(flags['out-dir']));
    const status = await compileTree({ outDir });
    if (status !== 0) {
      err('build: tsc failed');
      return status;
    }
    out(`build: ${path.relative(root, outDir) || '.'} ready`);
    return 0;
  },
};

runMain(buildCommand, import.meta.url);
