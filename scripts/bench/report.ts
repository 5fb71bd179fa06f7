import type { Compared, Repeated } from './lib/stats.ts';
import type { Beside, DropCost } from './history.ts';
import { renderNoisy } from './noisy.ts';
import type { BenchResults } from './run.ts';
import type { TargetResult } from './targets.ts';
import { renderTracing } from './tracing.ts';
import { renderOverload } from './overload.ts';
import { GUARANTEES, PEERS } from './peers/guarantees.ts';

/** bench-results.md: the same figures as the JSON, as tables a person reads. */

const n = (v: number | null | undefined, digits = 0) =>
  v === null || v === undefined || !Number.isFinite(v)
    ? '—'
    : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const x = (v: number | null | undefined) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : `${n(v, 2)}×`);
/** A median with its spread over the runs: "1,234 (1,100–1,300)". */
const mm = <T extends Record<string, number>>(rep: Repeated<T>, k: keyof T, digits = 0) =>
  rep.runs.length > 1 ? `${n(rep.median[k], digits)} (${n(rep.min[k], digits)}–${n(rep.max[k], digits)})` : n(rep.median[k], digits);

const MIB = 2 ** 20;
/** A byte count's median and spread in MiB. */
const mmMiB = <T extends Record<string, number>>(rep: Repeated<T>, k: keyof T) =>
  rep.runs.length > 1
    ? `${n((rep.median[k] as number) / MIB, 1)} (${n((rep.min[k] as number) / MIB, 1)}–${n((rep.max[k] as number) / MIB, 1)})`
    : n((rep.median[k] as number) / MIB, 1);

const LABELS: Record<string, string> = {
  bestOfOurs: '**best of ours** (the fastest median of these, chosen after the run)',
  bestPeer: '**strongest peer configuration**',
};

/**
 * Every configuration of ours (rows) against each peer's strongest configuration and the
 * strongest of all (columns), each column labelled with the configuration it is.
 */
function ratioTable<T extends Record<string, number>>(L: string[], c: Compared<T>, rate: keyof T & string) {
  const cols = Object.keys(Object.values(c.ratios)[0] ?? {});
  const median = (k: string) => c.configs[k]!.runs.median[rate] as number;
  const strongestOfAll = Object.values(c.strongest).reduce<string | undefined>(
    (a, k) => (a === undefined || median(k) > median(a) ? k : a),
    undefined,
  );
  const head = (col: string) => {
    const key = col === 'bestPeer' ? strongestOfAll : c.strongest[col];
    const name = col === 'bestPeer' ? LABELS.bestPeer! : `strongest ${col}`;
    return key ? `${name} (${c.configs[key]!.label})` : name;
  };
  L.push(`| ours ÷ | ${cols.map(head).join(' | ')} |`, `|---|${cols.map(() => '---:').join('|')}|`);
  for (const [k, row] of Object.entries(c.ratios)) {
    L.push(`| ${LABELS[k] ?? c.configs[k]?.label ?? k} | ${cols.map((col) => x(row[col])).join(' | ')} |`);
  }
  L.push('');
}

/** Every configuration measured in a throughput section, the strongest of each peer marked. */
function configTable<T extends Record<string, number>>(
  L: string[],
  c: Compared<T>,
  rate: keyof T & string,
  time: keyof T & string,
  timeHead: string,
) {
  L.push(`| Configuration | Messages/s | ${timeHead} | Runs (msg/s) |`, '|---|---:|---:|---|');
  const marked = new Set(Object.values(c.strongest));
  for (const [k, m] of Object.entries(c.configs)) {
    const label = marked.has(k) ? `${m.label} **(strongest ${m.system})**` : m.label;
    L.push(`| ${label} | ${mm(m.runs, rate)} | ${mm(m.runs, time, 2)} | ${m.runs.runs.map((v) => n(v[rate])).join(', ')} |`);
  }
  L.push('');
}

/** Each peer's same-guarantee configuration, and what its fastest one gives up, one line each. */
function guaranteeLines(L: string[]) {
  L.push(
    'Each peer two ways: its fastest configuration, and its configuration that keeps what we keep (per-key order, a completion a stale worker cannot overwrite, history kept for the retention); the targets compare with the second.',
    '',
  );
  for (const [peer, g] of Object.entries(GUARANTEES)) {
    L.push(`- **${peer}**, same guarantees: ${g.same} Its fastest configuration gives up ${g.fastestGivesUp}`);
  }
  L.push('');
}

/** The targets whose name starts with `prefix`, as lines under a section's tables. */
function targetLines(L: string[], targets: TargetResult[] | undefined, prefix: string) {
  const ts = (targets ?? []).filter((t) => t.name.startsWith(prefix));
  if (ts.length === 0) return;
  for (const t of ts)
    L.push(`- ${t.name}: ${t.value}, target ${t.target}: ${t.met === null ? 'not measured' : t.met ? 'met' : '**missed**'}`);
  L.push('');
}

export function renderMarkdown(r: BenchResults): string {
  const L: string[] = [];
  const p = r.params;
  L.push(`# StayHub benchmark results (${r.mode} run)`, '');
  L.push(
    `${r.startedAt} · ${r.durationSeconds ?? '?'} s · each figure is the median of ${p.runs} interleaved run(s), min–max in brackets · one embedded PostgreSQL, a fresh database for every run of every system`,
    '',
    `Code: ${r.code.commit ?? 'unknown commit'}${r.code.dirty ? ` **with uncommitted changes** (${r.code.dirtyFiles.join(', ')})` : r.code.dirty === false ? ' (clean tree)' : ''}.`,
    '',
  );
  const loads = Object.entries(r.load);
  if (loads.length) {
    L.push(
      `Load average (1 min) before each section, on ${loads[0]![1].cores} cores: ${loads.map(([k, l]) => `${k} ${l.loadAverage1m}${l.overloaded ? ' **(over the cores: noisy)**' : ''}`).join(' · ')}.`,
      '',
    );
  }
  L.push('## Machine and versions', '');
  L.push(
    `- CPU: ${r.machine.cpuModel}, ${r.machine.cores} cores; memory ${r.machine.memoryGiB} GiB; ${r.machine.os}; load average at start ${r.machine.loadAverageAtStart.join(' / ')}`,
  );
  const v = r.versions;
  L.push(
    `- Node ${v.node}; PostgreSQL ${v.postgres}; ${v.pgbench ?? 'pgbench not installed'}; ${v.natsServer ?? 'nats-server not installed'}; graphile-worker ${v.graphileWorker}; pg-boss ${v.pgBoss}; autocannon ${v.autocannon}; pg ${v.pg}; fastify ${v.fastify}`,
  );
  L.push(
    `- PostgreSQL settings: ${Object.entries(r.postgresSettings)
      .filter(([k]) => k !== 'server_version')
      .map(([k, s]) => `${k}=${s}`)
      .join(', ')}`,
  );
  L.push('');

  if (r.targets) {
    L.push('## Targets', '', '| Target | Goal | This run | |', '|---|---|---|---|');
    for (const t of r.targets)
      L.push(`| ${t.name} | ${t.target} | ${t.value} | ${t.met === null ? 'not measured' : t.met ? 'met' : '**missed**'} |`);
    L.push('');
  }

  if (r.drain) {
    const d = r.drain;
    L.push(`## 1. Drain throughput (${n(p.drainMessages)} no-op messages, committed before the clock starts)`, '');
    configTable(L, d, 'perSecond', 'drainSeconds', 'Drain time (s)');
    L.push(
      'Ours: `--until-empty`, batch 500 growing to 1,000 / concurrency 32, LOG_LEVEL=warn (the defaults row: 20 growing to 1,000 / 8, LOG_LEVEL=info). Drain floor ×n: our claim and DONE statements alone, bare `pg`, n lanes of one claim connection and one DONE write in flight each, batch 1,000 (scripts/bench/floors.ts).',
      '',
      "Ratios of medians, each configuration of ours against each peer's strongest configuration:",
      '',
    );
    ratioTable(L, d, 'perSecond');
    guaranteeLines(L);
    L.push(`Ours / drain floor (same batch, same connections): ×1 ${x(d.floorRatios.ours1)}, ×2 ${x(d.floorRatios.ours2)}.`, '');
    targetLines(L, r.targets, 'Drain');
  }

  if (r.burst) {
    const b = r.burst;
    L.push(
      `## 1b. Idle workers hit by a burst (${n(b.messages)} no-op messages committed in one statement; clock from COMMIT to nothing pending)`,
      '',
    );
    configTable(L, b, 'perSecond', 'seconds', 'Seconds from COMMIT');
    L.push(
      'Each configuration after a warm-up batch (100 handled, then 1 s idle) and "cold" (started, 1 s idle, no warm-up).',
      '',
      "Ratios of medians, each configuration of ours against each peer's strongest configuration:",
      '',
    );
    ratioTable(L, b, 'perSecond');
    guaranteeLines(L);
    targetLines(L, r.targets, 'Burst');
  }

  if (r.latency) {
    const l = r.latency;
    L.push(`## 2. Commit → handler latency (idle worker; ${p.latencySamples} samples per run, pg-boss ${p.pgBossLatencySamples})`, '');
    L.push('| System | p50 (ms) | p99 (ms) | max (ms) | mean (ms) |', '|---|---:|---:|---:|---:|');
    const row = (name: string, rep: typeof l.ours) =>
      L.push(`| ${name} | ${mm(rep, 'p50', 2)} | ${mm(rep, 'p99', 2)} | ${mm(rep, 'max', 2)} | ${mm(rep, 'mean', 2)} |`);
    row('ours (LISTEN/NOTIFY)', l.ours);
    row('graphile-worker (LISTEN/NOTIFY)', l.graphile);
    row('pg-boss (LISTEN/NOTIFY, polling every 0.5 s behind it)', l.pgBoss);
    if (l.graphileKeyed) row(`${PEERS.graphile.same}: a queue per key`, l.graphileKeyed);
    if (l.pgBossKeyed) row(`${PEERS.pgBoss.same}: key_strict_fifo, a key per job`, l.pgBossKeyed);
    row(`latency floor: a bare LISTEN/NOTIFY round trip (${p.latencyFloorSamples} samples)`, l.floor);
    L.push(
      '',
      (l.graphileKeyed
        ? `Ours / ${PEERS.graphile.same} (the target's peer): p50 ${x(l.ours.median.p50 / l.graphileKeyed.median.p50)}, p99 ${x(l.ours.median.p99 / l.graphileKeyed.median.p99)}. `
        : '') +
        `Ours / graphile-worker, fastest: p50 ${x(l.ours.median.p50 / l.graphile.median.p50)}, p99 ${x(l.ours.median.p99 / l.graphile.median.p99)}. ` +
        `Ours / latency floor: p50 ${x(l.floorRatios.p50)}, p99 ${x(l.floorRatios.p99)} (reported, no target).`,
      '',
    );
    targetLines(L, r.targets, 'Latency');
  }

  if (r.api) {
    L.push(`## 3. The booking write path: API vs pgbench on the same SQL (${p.httpSeconds} s / ${p.pgbenchSeconds} s per run)`, '');
    L.push(
      '| Connections | API req/s | API p99 (ms) | pgbench -M extended tps | pgbench p99 (ms) | API / pgbench -M extended |',
      '|---:|---:|---:|---:|---:|---:|',
    );
    for (const c of r.api.byConnections) {
      L.push(
        `| ${c.connections} | ${mm(c.api, 'rps')} | ${mm(c.api, 'p99', 1)} | ${c.pgbench ? mm(c.pgbench, 'tps') : '—'} | ${c.pgbench ? mm(c.pgbench, 'p99', 1) : '—'} | ${x(c.ratio)} |`,
      );
    }
    L.push('', `Answers other than 201 in the non-conflicting runs: ${r.api.non201}.`, '');
    targetLines(L, r.targets, 'API');
    if (r.api.prepared) {
      const sp = r.api.prepared;
      L.push(
        `The target's peer: pgbench \`-M prepared\` at ${sp.connections} connections, ${mm(sp.pgbench, 'tps')} tps; API / pgbench ${x(sp.ratio)}. ` +
          "The API's booking statements are named, parsed once per connection: that is `-M prepared`'s protocol, while " +
          '`-M extended` (the table above) parses every statement every time.',
        '',
      );
    }
  }

  L.push('## 4. What the outbox costs a booking (pgbench, same transaction with and without the outbox insert + pg_notify)', '');
  if (r.outboxCost) {
    const o = r.outboxCost;
    L.push('| Clients | with outbox (tps) | without (tps) | with / without | cost |', '|---:|---:|---:|---:|---:|');
    L.push(`| ${o.clients} | ${mm(o.withOutbox, 'tps')} | ${mm(o.withoutOutbox, 'tps')} | ${x(o.ratio)} | ${n(o.costPercent, 1)} % |`, '');
    const d = o.diagnostics;
    L.push('Where the cost is (same clients, diagnostic variants of the transaction):', '');
    L.push('| Variant | tps | cost vs no outbox |', '|---|---:|---:|');
    L.push(
      `| outbox row, pg_notify right after COMMIT (what the service does under load) | ${n(o.withOutbox.median.tps)} | ${n(o.costPercent, 1)} % |`,
    );
    L.push(`| outbox row, no pg_notify | ${n(d.rowWithoutNotify.median.tps)} | ${n(d.rowWithoutNotifyCostPercent, 1)} % |`);
    L.push(
      `| outbox row, pg_notify inside the transaction (the first design) | ${n(d.notifyInTransaction.median.tps)} | ${n(d.notifyInTransactionCostPercent, 1)} % |`,
      '',
    );
  } else L.push('Not measured (pgbench missing or the section failed).', '');

  if (r.claim) {
    const c = r.claim.runs.median;
    L.push(`## 5. Claim cost against history (one claim of ${p.claimBatch}; ${n(p.claimPending)} PENDING)`, '');
    L.push(`| 0 DONE rows (ms) | ${n(p.claimDone)} DONE rows (ms) | ratio |`, '|---:|---:|---:|');
    L.push(`| ${n(c.emptyMs, 3)} | ${n(c.withHistoryMs, 3)} | ${x(c.ratio)} |`, '');
    L.push('The claim as the worker sends it, explained on the table with history:', '', '```', r.claim.explain, '```', '');
  }

  if (r.io) {
    L.push(`## 6. Scaling when handlers wait on I/O (${n(p.ioMessages)} messages, handler sleeps ${p.ioSleepMs} ms)`, '');
    L.push('| Processes | Messages/s | vs 1 process |', '|---:|---:|---:|');
    for (const [k, rep] of Object.entries(r.io.byProcesses)) L.push(`| ${k} | ${mm(rep, 'perSecond')} | ${x(r.io.scaling[`x${k}`])} |`);
    L.push('');
  }

  if (r.conflicts) {
    const c = r.conflicts.runs.median;
    L.push(`## 7. Conflicts under contention (${r.conflicts.connections} connections, all booking the same dates)`, '');
    const rr = r.conflicts.runs;
    L.push(
      '| req/s | p99 (ms) | 409 share | expected | rounds | 201 | bookings kept | most winners in a round | 5xx | other |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    );
    L.push(
      `| ${mm(rr, 'rps')} | ${mm(rr, 'p99', 1)} | ${n(c.share409, 2)} % | ${n(r.conflicts.expectedShare409, 2)} % | ${n(c.rounds)} | ${n(c.created201)} | ${n(c.bookingsKept)} | ${n(rr.max.maxWinnersPerRound)} | ${n(rr.max.server5xx)} | ${n(rr.max.other)} |`,
      '',
    );
  }

  if (r.relay !== undefined) {
    L.push(
      `## 8. Relaying the outbox into JetStream (${n(p.relayMessages)} booking.created messages, committed before the clock starts)`,
      '',
    );
    if (r.relay) {
      const rl = r.relay;
      L.push('| Configuration | Messages/s | Time (s) | Runs (msg/s) |', '|---|---:|---:|---|');
      L.push(
        `| events relay into JetStream (in-process worker, batch 500 / concurrency 32, PubAck awaited) | ${mm(rl.relay, 'perSecond')} | ${mm(rl.relay, 'drainSeconds', 2)} | ${rl.relay.runs.map((v) => n(v.perSecond)).join(', ')} |`,
      );
      L.push(
        `| relay floor: the same messages from a bare JetStream client, 32 publishes in flight | ${mm(rl.floor, 'perSecond')} | ${mm(rl.floor, 'drainSeconds', 2)} | ${rl.floor.runs.map((v) => n(v.perSecond)).join(', ')} |`,
      );
      if (rl.replicated) {
        L.push(
          `| events relay into a three-node cluster, the stream at three replicas (Debian's nats-server 2.9: no fsync per write) | ${mm(rl.replicated, 'perSecond')} | ${mm(rl.replicated, 'drainSeconds', 2)} | ${rl.replicated.runs.map((v) => n(v.perSecond)).join(', ')} |`,
        );
      }
      L.push('', `Relay / relay floor (medians): ${x(rl.ratio)}.`, '');
      if (rl.replicatedRatio !== undefined) L.push(`Relay at three replicas / at one (medians): ${x(rl.replicatedRatio)}.`, '');
      targetLines(L, r.targets, 'Relay');
    } else L.push('Not measured (nats-server not installed).', '');
  }

  if (r.webhooks) {
    const w = r.webhooks;
    L.push(
      `## 9. Webhooks (scripts/bench/webhooks.ts)`,
      '',
      `${n(w.deliveries)} deliveries, written before the clock starts, sent by one process's webhook sender (its defaults: 32 in flight, 4 per endpoint, 8 per host) to 8 endpoints of a local receiver that answers 204 at once; each signed, POSTed and its attempt recorded; on kept-alive connections (the default), and, in the same runs, on a new connection per attempt (WEBHOOK_KEEP_ALIVE=false).`,
      '',
      '| Figure | Median | Runs |',
      '|---|---:|---|',
      `| deliveries/s to a no-op receiver, kept-alive connections | ${mm(w.throughput, 'perSecond')} | ${w.throughput.runs.map((v) => n(v.perSecond)).join(', ')} |`,
      ...(w.throughputPerAttemptConnection
        ? [
            `| deliveries/s to a no-op receiver, a new connection per attempt | ${mm(w.throughputPerAttemptConnection, 'perSecond')} | ${w.throughputPerAttemptConnection.runs.map((v) => n(v.perSecond)).join(', ')} |`,
            `| kept-alive / a connection per attempt (medians) | ${x(w.keepAliveRatio)} | |`,
          ]
        : []),
      `| healthy endpoint p50 / p99, alone (ms) | ${mm(w.isolation, 'aloneP50', 1)} / ${mm(w.isolation, 'aloneP99', 1)} | ${w.isolation.runs.map((v) => `${n(v.aloneP99, 1)}`).join(', ')} (p99) |`,
      `| healthy endpoint p50 / p99 beside an endpoint that never answers, with ${n(1000)} deliveries due (ms) | ${mm(w.isolation, 'besideP50', 1)} / ${mm(w.isolation, 'besideP99', 1)} | ${w.isolation.runs.map((v) => `${n(v.besideP99, 1)}`).join(', ')} (p99) |`,
      '',
      `Latency: ${n(p.webhookRate)} booking events a second for ${n(p.webhookSeconds)} s, each recorded as the fan-out handler records it and the sender woken; clock from the record to the request's arrival at the receiver.` +
        (w.ratioToNoopDrain === null ? '' : ` Deliveries/s over our no-op outbox drain ×1: ${x(w.ratioToNoopDrain)}.`),
      '',
    );
    targetLines(L, r.targets, 'Webhooks');
  }

  if (r.tracing) L.push(...renderTracing(r.tracing));
  if (r.noisy) L.push(...renderNoisy(r.noisy, mm));

  if (r.purge) {
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
  }

  if (r.growth) {
    const g = r.growth;
    const procs = Object.keys(g.byHistory[0]?.byProcesses ?? {});
    L.push(
      `## 11. Where the cost grows (drain of ${n(g.messages)} no-op messages, our throughput settings, on a DONE history; ${p.historyRuns} run(s))`,
      '',
    );
    L.push(
      `| DONE history | ${procs.map((k) => `×${k} (msg/s)`).join(' | ')} | claim of ${p.claimBatch} (ms) |`,
      `|---:|${procs.map(() => '---:').join('|')}|---:|`,
    );
    for (const h of g.byHistory) {
      L.push(`| ${n(h.history)} | ${procs.map((k) => mm(h.byProcesses[k]!, 'perSecond')).join(' | ')} | ${mm(h.claimMs, 'ms', 3)} |`);
    }
    L.push('', `Claim: the median of ${n(p.claimSamples)} claims on ${n(p.claimPending)} PENDING rows after the history, rolled back.`, '');
  }

  if (r.apiHistory) {
    const ah = r.apiHistory;
    L.push(`## 12. The booking write path on a long bookings history (${ah.connections} connections, ${p.httpSeconds} s a run)`, '');
    L.push('| Bookings table | req/s | p50 (ms) | p99 (ms) |', '|---|---:|---:|---:|');
    L.push(`| empty | ${mm(ah.empty, 'rps')} | ${mm(ah.empty, 'p50', 1)} | ${mm(ah.empty, 'p99', 1)} |`);
    L.push(`| ${n(ah.bookings)} past bookings | ${mm(ah.history, 'rps')} | ${mm(ah.history, 'p50', 1)} | ${mm(ah.history, 'p99', 1)} |`);
    L.push('', `With history / empty: p50 ${x(ah.p50Ratio)}, p99 ${x(ah.p99Ratio)}. Answers other than 201: ${ah.non201}.`, '');
    targetLines(L, r.targets, 'Booking history');
  }

  if (r.overload) L.push(...renderOverload(r.overload));

  L.push('## How each system was run', '');
  for (const [k, s] of Object.entries(r.setup)) L.push(`- **${k}**: ${s}`);
  L.push('');
  if (r.errors.length) {
    L.push('## Sections that failed', '');
    for (const e of r.errors) L.push(`- ${e.section}: ${e.message.split('\n')[0]}`);
    L.push('');
  }
  return `${L.join('\n')}\n`;
}
