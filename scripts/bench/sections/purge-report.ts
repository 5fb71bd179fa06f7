import type { Beside, DropCost } from '../history.ts';
import { MIB, mm, mmMiB, n, targetLines, x } from '../lib/markdown.ts';
import type { Repeated } from '../lib/stats.ts';
import type { BenchResults } from '../results.ts';

/** The purge section's part of bench-results.md (sections/purge.ts measures it). */
export function purgeMarkdown(r: BenchResults): string[] {
  if (!r.purge) return [];
  const p = r.params;
  const L: string[] = [];
  const pu = r.purge;
  const a = pu.deleteRows;
  const d = pu.dropPartition;
  const big = pu.dropLargePartition;
  const dropRows = (label: string, short: string, dc: Repeated<DropCost>) => [
    `| ${label}: time (ms) | ${mm(dc, 'ms', 1)} | ${dc.runs.map((v) => n(v.ms, 1)).join(', ')} |`,
    `| ${short}: of which statistics / DETACH … CONCURRENTLY / DROP TABLE (ms) | ${n(dc.median.statsMs, 1)} / ${n(dc.median.detachMs, 1)} / ${n(dc.median.dropMs, 1)} | |`,
    `| ${short}: WAL written (KiB) | ${n(dc.median.walBytes / 1024, 1)} | ${dc.runs.map((v) => n(v.walBytes / 1024, 1)).join(', ')} |`,
    `| ${short}: outbox, table + indexes (MiB): before / after | ${n(dc.median.tableBytesBefore / MIB, 1)} / ${n(dc.median.tableBytesAfter / MIB, 1)} | |`,
  ];
  /** "the DROP took 310 ms of the measurement's 1,650 ms" for each run, and whether it lasted the measurement. */
  const besideRuns = (b: Repeated<Beside>) =>
    b.runs.map((v) => `${n(v.purgeMs)} ms of ${n(v.measuredMs)} ms${v.ranThrough ? ' (still at work at its end)' : ''}`).join(', ');
  L.push(`## 10. Purging a long DONE history (${n(pu.rows)} DONE rows, one day's partition; ${p.historyRuns} run(s))`, '');
  L.push(
    `The history is one day of its own, a partition of the outbox (outbox_YYYYMMDD), its rows all DONE; both purges run at the clock where the retention has passed over that day, each once a run on a fresh clone holding ${n(pu.claim.pending)} PENDING rows in today's partition, nothing else on the server. **DELETE**: row by row, src/outbox/purge.ts purgeDoneBatch in purgeDone's loop, 1,000 rows a statement (the housekeeping's path for a day that cannot go whole, and the purge before the outbox had partitions), then a plain VACUUM. **DROP**: the partition as the housekeeping drops an expired day, src/outbox/partitions.ts dropOutboxPartition (its rows read from the statistics, DETACH … CONCURRENTLY, DROP TABLE), after a CHECKPOINT. Sizes are summed over the outbox's partitions and their indexes. After the DELETE, VACUUM cuts the emptied day's table back to nothing (its indexes keep their pages); a day holding stragglers, or an outbox without partitions, keeps its table's pages too.`,
    '',
    '| Figure | Median | Runs |',
    '|---|---:|---|',
    `| DELETE: time (s) | ${mm(a, 'seconds', 1)} | ${a.runs.map((v) => n(v.seconds, 1)).join(', ')} |`,
    `| DELETE: one batch of 1,000, the first ten / the last ten (ms) | ${mm(a, 'firstBatchesMs', 1)} / ${mm(a, 'lastBatchesMs', 1)} | |`,
    `| DELETE: WAL written (MiB) | ${mmMiB(a, 'walBytes')} | ${a.runs.map((v) => n(v.walBytes / MIB, 1)).join(', ')} |`,
    `| DELETE: outbox, table + indexes (MiB): before / after / after VACUUM | ${n(a.median.tableBytesBefore / MIB, 1)} / ${n(a.median.tableBytesAfter / MIB, 1)} / ${n(a.median.tableBytesAfterVacuum / MIB, 1)} | |`,
    `| DELETE: outbox_pending_available_idx (MiB): before / after / after VACUUM | ${n(a.median.pendingIdxBytesBefore / MIB, 2)} / ${n(a.median.pendingIdxBytesAfter / MIB, 2)} / ${n(a.median.pendingIdxBytesAfterVacuum / MIB, 2)} | |`,
    `| DELETE: outbox_key_idx (MiB): before / after / after VACUUM | ${n(a.median.keyIdxBytesBefore / MIB, 1)} / ${n(a.median.keyIdxBytesAfter / MIB, 1)} / ${n(a.median.keyIdxBytesAfterVacuum / MIB, 1)} | |`,
    `| VACUUM after the DELETE: time (s), WAL (MiB) | ${mm(a, 'vacuumSeconds', 1)}, ${mmMiB(a, 'vacuumWalBytes')} | |`,
    ...dropRows(`DROP of the partition (${n(d.median.partitionBytes / MIB, 0)} MiB)`, 'DROP', d),
    ...dropRows(
      `DROP of a larger day's partition, ${n(big.rows)} DONE rows (${n(big.runs.median.partitionBytes / MIB, 0)} MiB)`,
      `DROP of ${n(big.rows)}`,
      big.runs,
    ),
    '',
    `Our drain and claim alone, and with each purge of the same day running beside them on a connection of its own, started with the measurement (a drain's: when its first handler is entered): the DELETE until the measurement ends, the DROP until it is done (it cannot stop halfway). Claims: alone, beside the DELETE, then beside the DROP, on one clone (the claims are rolled back).`,
    '',
    '| Measurement | Alone | Beside the DELETE | Beside / alone | Beside the partition DROP | Beside / alone |',
    '|---|---:|---:|---:|---:|---:|',
    `| drain ×1, ${n(pu.drain.messages)} messages (msg/s) | ${mm(pu.drain.alone, 'perSecond')} | ${mm(pu.drain.besideDelete, 'perSecond')} | ${x(pu.drain.deleteRatio)} | ${mm(pu.drain.besideDrop, 'perSecond')} | ${x(pu.drain.dropRatio)} |`,
    `| claim of ${p.claimBatch}, ${n(pu.claim.pending)} PENDING: p50 (ms, ${n(pu.claim.samples)} claims a run) | ${mm(pu.claim.alone, 'p50', 3)} | ${mm(pu.claim.besideDelete, 'p50', 3)} | ${x(pu.claim.deleteP50Ratio)} | ${mm(pu.claim.besideDrop, 'p50', 3)} | ${x(pu.claim.dropP50Ratio)} |`,
    `| claim p99 (ms) | ${mm(pu.claim.alone, 'p99', 3)} | ${mm(pu.claim.besideDelete, 'p99', 3)} | ${x(pu.claim.deleteP99Ratio)} | ${mm(pu.claim.besideDrop, 'p99', 3)} | ${x(pu.claim.dropP99Ratio)} |`,
    '',
    `How long each purge ran, of the measurement it was beside (from the purge's start to the measurement's end), run by run. The DROP: drain ${besideRuns(pu.drain.besideDrop)}; claims ${besideRuns(pu.claim.besideDrop)}. The DELETE: drain ${besideRuns(pu.drain.besideDelete)}; claims ${besideRuns(pu.claim.besideDelete)}; rows it deleted meanwhile: drain ${pu.drain.besideDelete.runs.map((v) => n(v.purged)).join(', ')}, claims ${pu.claim.besideDelete.runs.map((v) => n(v.purged)).join(', ')}.`,
    '',
    `Where the DROP was over before the measurement ended, the rest of the measurement ran without any purge: its ratio says what the DROP costs while it runs and that it leaves nothing behind, not what a purge running throughout would cost.`,
    '',
  );
  targetLines(L, r.targets, 'Purge');
  return L;
}
