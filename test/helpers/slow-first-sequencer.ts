import { readFileSync } from 'node:fs';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/*
 * The suite runs two files at a time. A fresh clone (CI) has no record of how long each file
 * took, so vitest orders by file size, and a two-minute file that happens to start late (the
 * bench smoke) leaves the other worker idle for most of it at the end of the run. The slow
 * files say so in a line of their header, `Slow (about N s alone): why` (the rule for a slow file
 * in CONTRIBUTING.md); that line is also their place in the queue: longest first, the others after
 * them in vitest's own order. Projects and their order (sequence.groupOrder) are kept.
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
    // Runs of one project, in vitest's order; within each, the hinted files first, longest first.
    const out: TestSpecification[] = [];
    let run: TestSpecification[] = [];
    const flush = () => {
      const seconds = new Map(run.map((f) => [f, hintedSeconds(f.moduleId)]));
      out.push(...run.sort((a, b) => seconds.get(b)! - seconds.get(a)!));
      run = [];
    };
    for (const f of sorted) {
      if (run.length > 0 && run[0]!.project.name !== f.project.name) flush();
      run.push(f);
    }
    flush();
    return out;
  }
}
