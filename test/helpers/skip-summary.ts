import type { Reporter, TestModule, Vitest } from 'vitest/node';

/*
 * A reporter that ends the run with what was skipped and why. A missing optional tool (nats-server,
 * promtool) skips whole files on a developer's machine, and the warning the test file prints when it
 * decides so scrolls away long before the run ends: without this, a green run that checked less
 * than usual looks like every other green run.
 *
 * The reasons come from the test files: test/helpers/tools.ts `recordSkip` (called by
 * `skipWithout` and `skipWithoutNats`) adds them to the file's meta, and a test skipped with
 * `ctx.skip(note)` brings its note. Tests skipped for no stated reason (left out by -t or .only)
 * are not listed. Printed after vitest's own summary (this reporter comes after 'default' in
 * vitest.config.ts); nothing is printed when nothing was skipped for a reason.
 */
export default class SkipSummary implements Reporter {
  private vitest: Vitest | undefined;

  onInit(vitest: Vitest): void {
    this.vitest = vitest;
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const byReason = new Map<string, Map<string, number>>();
    let total = 0;
    for (const module of testModules) {
      const fileReasons = module.meta().skipReasons ?? [];
      for (const test of module.children.allTests('skipped')) {
        const result = test.result();
        const note = result.state === 'skipped' ? result.note : undefined;
        // Only skips with a reason: a test left out by -t or .only is not a gap in the run.
        const reason = note ?? (fileReasons.length ? fileReasons.join('; ') : undefined);
        if (reason === undefined) continue;
        const files = byReason.get(reason) ?? new Map<string, number>();
        files.set(module.relativeModuleId, (files.get(module.relativeModuleId) ?? 0) + 1);
        byReason.set(reason, files);
        total++;
      }
    }
    if (total === 0) return;
    const out: string[] = ['', `SKIPPED: ${total} test${total === 1 ? '' : 's'} did not run (they neither passed nor failed):`];
    for (const [reason, files] of byReason) {
      out.push(`  - ${reason}`);
      for (const [file, n] of [...files].sort(([a], [b]) => a.localeCompare(b))) out.push(`      ${file} (${n} test${n === 1 ? '' : 's'})`);
    }
    out.push('');
    const log = this.vitest?.logger;
    for (const line of out) {
      if (log) log.log(line);
      else console.log(line);
    }
  }
}
