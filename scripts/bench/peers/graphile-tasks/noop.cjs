// The no-op task of the drain benchmark: the queue's own overhead is what is measured. The first
// call of each process records when that process started working (see scripts/bench/lib/marks.ts).
const { renameSync, writeFileSync } = require('node:fs');
const path = require('node:path');

let marked = false;
module.exports = async () => {
  if (marked || !process.env.BENCH_MARK_DIR) return;
  marked = true;
  // Renamed into place, so the bench never reads it half written (scripts/bench/lib/marks.ts).
  const mark = path.join(process.env.BENCH_MARK_DIR, `first-${process.pid}`);
  writeFileSync(`${mark}.part`, String(performance.timeOrigin + performance.now()));
  renameSync(`${mark}.part`, mark);
};
