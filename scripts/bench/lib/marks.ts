import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * When did a drain start? Not when its processes were spawned: start-up time (node, tsx, module
 * loading, connecting) would count against the system, and subtracting a separately measured
 * start-up is fragile on a shared machine (one slow start makes the difference meaningless). So
 * every worker process records the wall-clock moment its first handler is entered, in a file of
 * its own (BENCH_MARK_DIR); the drain runs from the earliest of those to the last process's exit.
 * The same rule applies to every system (peers/graphile-tasks/noop.cjs, bench-worker.ts, and
 * pg-boss in-process).
 */
export const nowMs = () => performance.timeOrigin + performance.now();

/**
 * Called on every handler entry; writes the first one only (one small synchronous write a process).
 * Written under another name and renamed: a process whose first job is among the last of a drain
 * writes its mark while earliest() reads the folder, and an empty file read there counted as 0.
 * peers/graphile-tasks/noop.cjs writes its mark the same way.
 */
export function firstJobMarker(dir: string | undefined): () => void {
  let marked = false;
  return () => {
    if (marked || !dir) return;
    marked = true;
    const mark = path.join(dir, `first-${process.pid}`);
    writeFileSync(`${mark}.part`, String(nowMs()));
    renameSync(`${mark}.part`, mark);
  };
}

const MARK = /^first-\d+$/;

export function markDir(): { dir: string; started(): boolean; earliest(): number; cleanup(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-bench-marks-'));
  return {
    dir,
    /** Whether a process has entered its first handler yet. */
    started: () => readdirSync(dir).some((f) => MARK.test(f)),
    earliest() {
      const marks = readdirSync(dir)
        .filter((f) => MARK.test(f))
        .map((f) => Number(readFileSync(path.join(dir, f), 'utf8')));
      if (marks.length === 0) throw new Error('no worker process handled a message');
      return Math.min(...marks);
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
