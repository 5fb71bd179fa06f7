import { readFileSync } from 'node:fs';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/*
 * The suite runs three files at a time. A fresh clone (CI) has no record of how long each file
 * took, so vitest orders by file size, and a two-minute file that happens to start late (the
 * bench smoke) leaves the other workers idle for most of it at the end of the run. The slow
 * files say so in a line of their header, `Slow (about N s alone): why` (the rule for a slow file
 * in CONTRIBUTING.md); that line is also their place in the queue: longest first, whichever
 * project they belong to, the others after them in vitest's own order. Among the others, those of
 * projects that keep one process per file come before those that share one, so the shared ones
 * follow each other and a worker's process goes on from one to the next (vitest hands a shared
 * process on only when the next file in the queue can use it). The order of the project groups
 * (sequence.groupOrder) is kept.
 */
const HINT = /\bSlow \(about (\d+) s alone\)/;

function hintedSeconds(file: string): number {
  try {
    const m = HINT.exec(readFileSync(file, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const seconds = new Map(sorted.map((f) => [f, hintedSeconds(f.moduleId)]));
    const rank = (f: TestSpecification) => {
      const s = seconds.get(f)!;
      if (s > 0) return -s; // hinted: longest first
      return f.project.config.isolate === false ? 1 : 0;
    };
    // Array.prototype.sort is stable: within a rank, vitest's order stays.
    return sorted.sort((a, b) => a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder || rank(a) - rank(b));
  }
}
