import { addPending, concurrentPurge, dropPartitionCost, purgeCost, rowsInDay } from '../history.ts';
import type { Beside, DropCost, HistoryDay, PurgeCost, PurgeWay } from '../history.ts';
import { MIB, mm, mmMiB, n, targetLines, x } from '../lib/markdown.ts';
import { percentile, repeatEach, repeatOf, round, type Repeated } from '../lib/stats.ts';
import { OURS_THROUGHPUT, type BenchContext, type PartOf, type Drain } from '../context.ts';
import { claimTimes, oursDrain } from '../ours.ts';

type ClaimLat = { p50: number; p99: number };

/*
 * A long DONE history and its purge: deleted row by row and the partition dropped, each alone on
 * a fresh clone, and our drain and claim alone and beside each purge (history.ts).
 */

const WAY = { delete: 'the DELETE', drop: 'the partition DROP' } as const;

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

/** Our drain ×1 of `count` no-op messages with our throughput settings; `onStarted` when its clock starts. */
export const drainOurs = (url: string, count: number, processes: number, onStarted?: () => void) =>
  oursDrain(url, { topic: 'bench.noop', count, processes, env: OURS_THROUGHPUT, onStarted });

const claimLat = async (P: BenchContext['P'], url: string): Promise<ClaimLat> => {
  const ms = await claimTimes(url, P.purgeClaimSamples, P.claimBatch);
  return { p50: percentile(ms, 50), p99: percentile(ms, 99) };
};

/**
 * `measure` with a purge of the history beside it (history.ts concurrentPurge), started when
 * `measure` calls `start` (a drain: when its clock starts) and stopped when it ends.
 */
async function beside<T>(url: string, history: HistoryDay, way: PurgeWay, measure: (start: () => void) => Promise<T>) {
  const started: { purge?: ReturnType<typeof concurrentPurge> } = {};
  const inDay = way === 'drop' ? await rowsInDay(url, history) : history.rows;
  const m = await measure(() => {
    started.purge = concurrentPurge(url, history, way, inDay);
  }).catch(async (err: unknown) => {
    await started.purge?.stop();
    throw err;
  });
  if (!started.purge) throw new Error('the purge beside the measurement never started');
  return { ...m, ...(await started.purge.stop()) };
}

const besideLine = (b: Beside) =>
  `${b.purged.toLocaleString('en-US')} rows, purge ${Math.round(b.purgeMs)} ms of the measurement's ${Math.round(b.measuredMs)} ms`;

interface PurgeRuns {
  deletes: PurgeCost[];
  drops: DropCost[];
  largeDrops: DropCost[];
  drainsAlone: Drain[];
  drainsBeside: Record<PurgeWay, (Drain & Beside)[]>;
  claimsAlone: ClaimLat[];
  claimsBeside: Record<PurgeWay, (ClaimLat & Beside)[]>;
}

export const purgeSection = {
  name: 'purge',
  markdown: [{ place: 10, render: purgeMarkdown }],
  async run(ctx: BenchContext) {
    const { P, history } = ctx;
    const m: PurgeRuns = {
      deletes: [],
      drops: [],
      largeDrops: [],
      drainsAlone: [],
      drainsBeside: { delete: [], drop: [] },
      claimsAlone: [],
      claimsBeside: { delete: [], drop: [] },
    };
    for (let r = 0; r < P.historyRuns; r++) {
      await drainsBesidePurges(ctx, m, r);
      await claimsBesidePurges(ctx, m);
      await purgesAlone(ctx, m);
    }
    // The larger day serves nothing else: its template (GBs) goes now.
    await history.dropTemplate(P.purgeLargeRows);
    return { purge: purgeResult(ctx, m) };
  },
};

/** A clone each, the one drained first taking turns, so none always gets the warmer machine. */
async function drainsBesidePurges({ P, log, history }: BenchContext, m: PurgeRuns, r: number) {
  const order = (['alone', 'delete', 'drop'] as const).map((_, i, a) => a[(i + r) % a.length]!);
  for (const way of order) {
    await history.on(P.purgeRows, async (url, day) => {
      if (way === 'alone') {
        m.drainsAlone.push(await drainOurs(url, P.purgeDrainMessages, 1));
        log(`   drain ×1 alone: ${Math.round(m.drainsAlone.at(-1)!.perSecond)} msg/s`);
        return;
      }
      const d = await beside(url, day, way, (start) => drainOurs(url, P.purgeDrainMessages, 1, start));
      m.drainsBeside[way].push(d);
      log(`   drain ×1 beside ${WAY[way]}: ${Math.round(d.perSecond)} msg/s (${besideLine(d)})`);
    });
  }
}

/**
 * One clone: the claims are rolled back, so each set sees the same PENDING rows; the DELETE
 * before the DROP, which leaves nothing to delete (the DROP then takes fewer rows).
 */
async function claimsBesidePurges({ P, log, history }: BenchContext, m: PurgeRuns) {
  await history.on(P.purgeRows, async (url, day) => {
    await addPending(url, P.claimPending);
    m.claimsAlone.push(await claimLat(P, url));
    for (const way of ['delete', 'drop'] as const) {
      m.claimsBeside[way].push(
        await beside(url, day, way, (start) => {
          start();
          return claimLat(P, url);
        }),
      );
    }
    const [a, d, p] = [m.claimsAlone.at(-1)!, m.claimsBeside.delete.at(-1)!, m.claimsBeside.drop.at(-1)!];
    const ms = (c: ClaimLat) => `${c.p50.toFixed(3)}/${c.p99.toFixed(3)} ms`;
    log(`   claim p50/p99: alone ${ms(a)}, beside the DELETE ${ms(d)} (${besideLine(d)}), beside the DROP ${ms(p)} (${besideLine(p)})`);
  });
}

/**
 * Each purge alone on a fresh clone, nothing else on the server, with PENDING rows in today's
 * partition as a live outbox has (neither purge may touch them).
 */
async function purgesAlone({ P, log, history }: BenchContext, m: PurgeRuns) {
  await history.on(P.purgeRows, async (url, day) => {
    await addPending(url, P.claimPending);
    m.deletes.push(await purgeCost(url, day));
    const p = m.deletes.at(-1)!;
    log(
      `   DELETE of ${p.rows.toLocaleString('en-US')} rows: ${p.seconds.toFixed(1)} s (a batch ${p.firstBatchesMs.toFixed(1)} ms at first, ${p.lastBatchesMs.toFixed(1)} ms at the end), ${mib(p.walBytes)} WAL; outbox ${mib(p.tableBytesBefore)} → ${mib(p.tableBytesAfter)}, ${mib(p.tableBytesAfterVacuum)} after VACUUM (${p.vacuumSeconds.toFixed(1)} s)`,
    );
  });
  const dropLine = (d: DropCost) =>
    `${d.rows.toLocaleString('en-US')} rows (${mib(d.partitionBytes)}): ${d.ms.toFixed(1)} ms (statistics ${d.statsMs.toFixed(1)}, detach ${d.detachMs.toFixed(1)}, drop ${d.dropMs.toFixed(1)}), ${(d.walBytes / 1024).toFixed(1)} KiB WAL; outbox ${mib(d.tableBytesBefore)} → ${mib(d.tableBytesAfter)}`;
  for (const [size, into] of [
    [P.purgeRows, m.drops],
    [P.purgeLargeRows, m.largeDrops],
  ] as const) {
    await history.on(size, async (url, day) => {
      await addPending(url, P.claimPending);
      into.push(await dropPartitionCost(url, day));
      log(`   DROP of the partition of ${dropLine(into.at(-1)!)}`);
    });
  }
}

function purgeResult({ P, log }: BenchContext, m: PurgeRuns) {
  const d = repeatEach({ alone: m.drainsAlone, besideDelete: m.drainsBeside.delete, besideDrop: m.drainsBeside.drop });
  const c = repeatEach({ alone: m.claimsAlone, besideDelete: m.claimsBeside.delete, besideDrop: m.claimsBeside.drop });
  /** Median beside over median alone. */
  const over = <T extends Record<string, number>>(beside: Repeated<T>, alone: Repeated<T>, k: keyof T) =>
    round(beside.median[k]! / alone.median[k]!, 3);
  const drain = {
    messages: P.purgeDrainMessages,
    ...d,
    deleteRatio: over(d.besideDelete, d.alone, 'perSecond'),
    dropRatio: over(d.besideDrop, d.alone, 'perSecond'),
  };
  const claim = {
    samples: P.purgeClaimSamples,
    pending: P.claimPending,
    ...c,
    deleteP50Ratio: over(c.besideDelete, c.alone, 'p50'),
    deleteP99Ratio: over(c.besideDelete, c.alone, 'p99'),
    dropP50Ratio: over(c.besideDrop, c.alone, 'p50'),
    dropP99Ratio: over(c.besideDrop, c.alone, 'p99'),
  };
  log(
    `   beside / alone: the DELETE: drain ${drain.deleteRatio}×, claim p50 ${claim.deleteP50Ratio}×, p99 ${claim.deleteP99Ratio}×; the partition DROP: drain ${drain.dropRatio}×, claim p50 ${claim.dropP50Ratio}×, p99 ${claim.dropP99Ratio}×`,
  );
  return {
    rows: P.purgeRows,
    deleteRows: repeatOf(m.deletes),
    dropPartition: repeatOf(m.drops),
    dropLargePartition: { rows: P.purgeLargeRows, runs: repeatOf(m.largeDrops) },
    drain,
    claim,
  };
}

/** The section's part of bench-results.md. */
function purgeMarkdown(r: PartOf<typeof purgeSection>): string[] {
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
