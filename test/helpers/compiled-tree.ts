import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compileTree } from '../../scripts/build.ts';
import { COMPILED_WORKER_ENTRIES } from '../../scripts/lib/processes.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * The product (src/) and the workers with extra handlers (COMPILED_WORKER_ENTRIES) compiled to
 * JavaScript once for the test run, for the entry points the tests start as processes (entryArgs,
 * scripts/lib/processes.ts): `npm run build`'s tsc for the production image, without the type
 * check (`npm run typecheck` has that job). About 6 s at the run's start, beside the test server's;
 * each of the hundred-odd processes the suite starts then saves about 0.6 CPU-s of tsx. The tree
 * lives in a temporary folder, where node_modules is a link to the checkout's.
 */
export async function compileForTests(): Promise<{ tree: string; remove: () => void }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-test-tree-'));
  const tree = path.join(dir, 'tree');
  const status = await compileTree({ outDir: tree, typeCheck: false, alsoCompile: COMPILED_WORKER_ENTRIES });
  if (status !== 0) throw new Error(`tsc could not compile the tree the tests run their processes from (exit ${status})`);
  // Outside the checkout, the tree needs the package's module type and a way to its dependencies.
  writeFileSync(path.join(tree, 'package.json'), JSON.stringify({ type: 'module' }));
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(tree, 'node_modules'));
  return { tree, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
