import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_OUT } from '../../../scripts/bench/params.ts';

/*
 * `npm run bench -- --smoke`: every measurement of the benchmark once, on tiny inputs, against its
 * own embedded PostgreSQL (not the test server: the bench needs default settings, fsync on).
 * What is asserted is that every figure comes out (a broken section, a renamed column, a peer
 * upgrade that changes an API all fail here) and what holds under any load: never how fast
 * anything is, nor anything that needs a request to finish within some time (the smoke's HTTP and
 * pgbench runs are fixed request counts, not durations, so a busy machine makes them slower, not
 * empty). Smoke inputs are too small for the numbers to mean anything.
 *
 * A run's outputs are data, not source: the results go to --out (var/bench/ by default, which git
 * ignores) and nothing else lands in the repository. The smoke run is checked against
 * `git status` before and after (so nothing else may edit the tree while it runs).
 *
 * Slow (about 120 s alone): every section of the bench runs once, end to end, with its own
 * PostgreSQL, the peers and pgbench.
 */

const root = path.resolve(import.meta.dirname, '../../..');
const out = mkdtempSync(path.join(os.tmpdir(), 'stayhub-bench-smoke-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const finitePositive = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v > 0;

/** Untracked (each file, ignored ones left out) and modified paths, as `git status --porcelain` lines. */
const gitStatus = () =>
  execFileSync('git', ['status', '--porcelain', '--untracked-files=all'], { cwd: root, encoding: 'utf8' }).split('\n').filter(Boolean);

const runScript = (script: string, ...args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', script, ...args], { cwd: root, encoding: 'utf8', timeout: 120_000 });

/** A script's `--help`, run once for the tests that read it: a node and tsx start costs a second of CPU. */
const helpRuns = new Map<string, ReturnType<typeof runScript>>();
const helpOf = (script: string) => helpRuns.get(script) ?? helpRuns.set(script, runScript(script, '--help')).get(script)!;

describe('npm run bench -- --smoke', () => {
  it('writes its results under var/bench/ by default, which git ignores', () => {
    expect(DEFAULT_OUT).toBe(path.join(root, 'var', 'bench'));
    const ignored = spawnSync('git', ['check-ignore', '--quiet', path.join(DEFAULT_OUT, 'bench-results.json')], { cwd: root });
    expect(ignored.status, 'var/bench/bench-results.json must be git-ignored').toBe(0);
    expect(helpOf('scripts/bench/run.ts').stdout).toContain('(default: var/bench)');
  });

  it('runs every measurement and writes every figure, and nothing into the repository', { timeout: 600_000 }, () => {
    const before = new Set(gitStatus());
    // At the lowest priority but one (its PostgreSQL, pgbench and load generators inherit it): it runs
    // beside the suite's other files, which judge waits and rates and so get the cores first.
    const run = spawnSync('nice', ['-n', '15', process.execPath, '--import', 'tsx', 'scripts/bench/run.ts', '--smoke', '--out', out], {
      cwd: root,
      encoding: 'utf8',
      timeout: 590_000, // a hang, not slowness: on a loaded machine the smoke takes minutes
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    // Taken now, asserted last: a stray file fails the test after every figure has been checked.
    const written = gitStatus().filter((line) => !before.has(line));

    const r = JSON.parse(readFileSync(path.join(out, 'bench-results.json'), 'utf8'));
    expect(r.mode).toBe('smoke');
    expect(r.errors).toEqual([]);
    expect(r.machine.cores).toBeGreaterThan(0);
    expect(r.postgresSettings.fsync).toBe('on');
    expect(r.postgresSettings.synchronous_commit).toBe('on');
    // Traceable: the commit measured, the load before each section (flagged above the cores) and its time.
    expect(r.code.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(typeof r.code.dirty).toBe('boolean');
    for (const section of ['claim', 'drain', 'burst', 'latency', 'io', 'relay', 'webhooks', 'api', 'fanout']) {
      expect(r.load[section].overloaded, section).toBe(r.load[section].loadAverage1m > r.load[section].cores);
      expect(r.seconds[section], section).toBeGreaterThanOrEqual(0);
    }

    // Every configuration measured (ours, the floors, each peer's), each with its median and spread.
    // Each peer two ways: its fastest configuration and the one keeping what we keep (…Keyed).
    const pgBossKeys = r.params.pgBossConfigs.map(
      (c: { batchSize: number; workers: number; keyed?: boolean }) => `pgBoss${c.batchSize}x${c.workers}${c.keyed ? 'Keyed' : ''}`,
    );
    expect(pgBossKeys.filter((k: string) => k.endsWith('Keyed')).length).toBeGreaterThan(0);
    expect(Object.keys(r.drain.configs).sort()).toEqual(
      [
        'ours1',
        'ours2',
        'ours1Default',
        'floor1',
        'floor2',
        'graphileCli',
        'graphileRun',
        'graphileCliKeyed',
        'graphileRunKeyed',
        ...pgBossKeys,
      ].sort(),
    );
    for (const [key, c] of Object.entries(r.drain.configs) as [
      string,
      { runs: { median: { perSecond: number }; min: { perSecond: number }; max: { perSecond: number } } },
    ][]) {
      expect(finitePositive(c.runs.median.perSecond), `drain ${key}`).toBe(true);
      expect(c.runs.min.perSecond).toBeLessThanOrEqual(c.runs.max.perSecond);
    }
    // Each peer at its strongest configuration, both ways; every configuration of ours against each of them.
    const peers = ['graphile-worker', 'graphile-worker, same guarantees', 'pg-boss', 'pg-boss, same guarantees'];
    expect(Object.keys(r.drain.strongest).sort()).toEqual(peers);
    for (const mine of ['ours1', 'ours2', 'ours1Default', 'bestOfOurs']) {
      for (const peer of [...peers, 'bestPeer']) expect(finitePositive(r.drain.ratios[mine][peer]), `drain ${mine}/${peer}`).toBe(true);
    }
    const strongestDrain = Math.max(
      ...Object.values(r.drain.strongest as Record<string, string>).map((k) => r.drain.configs[k].runs.median.perSecond),
    );
    expect(r.drain.ratios.ours1.bestPeer).toBeCloseTo(r.drain.configs.ours1.runs.median.perSecond / strongestDrain, 2);
    // Ours beside the drain floor: the same statements with no framework around them.
    for (const n of ['ours1', 'ours2']) expect(finitePositive(r.drain.floorRatios[n]), `drain floor ${n}`).toBe(true);
    // Idle workers hit by one committed burst: every system in every configuration, warmed up and cold.
    const warm = ['ours1', 'ours2', 'graphileCli1', 'graphileRun', 'graphileCli1Keyed', 'graphileRunKeyed', ...pgBossKeys];
    expect(Object.keys(r.burst.configs).sort()).toEqual([...warm, ...warm.map((k) => `${k}Cold`)].sort());
    for (const [key, c] of Object.entries(r.burst.configs) as [string, { runs: { median: { perSecond: number } } }][]) {
      expect(finitePositive(c.runs.median.perSecond), `burst ${key}`).toBe(true);
    }
    expect(Object.keys(r.burst.strongest).sort()).toEqual(peers);
    for (const mine of ['ours1', 'ours2', 'ours1Cold', 'ours2Cold', 'bestOfOurs']) {
      expect(finitePositive(r.burst.ratios[mine].bestPeer), `burst ${mine}`).toBe(true);
    }
    for (const system of ['ours', 'graphile', 'pgBoss', 'graphileKeyed', 'pgBossKeyed', 'floor']) {
      for (const k of ['p50', 'p99', 'max']) expect(finitePositive(r.latency[system].median[k]), `latency ${system} ${k}`).toBe(true);
    }
    expect(r.latency.floorRatios.p50).toBeCloseTo(r.latency.ours.median.p50 / r.latency.floor.median.p50, 2);
    for (const processes of ['1', '4']) {
      expect(finitePositive(r.io.byProcesses[processes].median.perSecond), `io ×${processes}`).toBe(true);
    }
    // The events relay beside the relay floor (a bare JetStream client publishing the same
    // messages); each run checked every message reached its stream once, or the section would have
    // failed. Where nats-server is installed.
    if (r.versions.natsServer) {
      expect(r.relay.messages).toBe(r.params.relayMessages);
      // …and the same relay into a three-node cluster, the stream at three replicas.
      for (const drain of ['relay', 'floor', 'replicated']) {
        expect(finitePositive(r.relay[drain].median.perSecond), `relay section: ${drain}`).toBe(true);
        expect(finitePositive(r.relay[drain].median.drainSeconds), `relay section: ${drain}`).toBe(true);
        expect(r.relay[drain].runs).toHaveLength(r.params.runs);
      }
      expect(r.relay.ratio).toBeCloseTo(r.relay.relay.median.perSecond / r.relay.floor.median.perSecond, 2);
      expect(r.relay.replicatedRatio).toBeCloseTo(r.relay.replicated.median.perSecond / r.relay.relay.median.perSecond, 2);
      expect(r.targets.find((t: { name: string }) => t.name.startsWith('Relay into JetStream / relay floor')).met).not.toBeNull();
    } else {
      // Without it the run says how to install it and leaves the relay figures out.
      expect(run.stdout).toContain('apt-get install -y nats-server');
      expect(r.relay).toBeNull();
    }
    // Webhooks: deliveries/s to a no-op receiver (against our no-op drain) and a healthy endpoint's
    // latency alone and beside a hanging one, every figure measured.
    expect(finitePositive(r.webhooks.throughput.median.perSecond)).toBe(true);
    // …on kept-alive connections and, in the same run, on a connection per attempt.
    expect(finitePositive(r.webhooks.throughputPerAttemptConnection.median.perSecond)).toBe(true);
    expect(r.webhooks.keepAliveRatio).toBeCloseTo(
      r.webhooks.throughput.median.perSecond / r.webhooks.throughputPerAttemptConnection.median.perSecond,
      2,
    );
    expect(r.webhooks.ratioToNoopDrain).toBeCloseTo(
      r.webhooks.throughput.median.perSecond / r.drain.configs.ours1.runs.median.perSecond,
      2,
    );
    // …and what a delivery cost each side, read on Linux: the sender, the receiver, PostgreSQL.
    if (process.platform === 'linux') {
      for (const mode of ['cpu', 'cpuPerAttemptConnection']) {
        for (const side of ['sender', 'receiver', 'postgres']) {
          expect(finitePositive(r.webhooks[mode].median[side]), `webhooks ${mode} ${side}`).toBe(true);
        }
      }
    }
    for (const k of ['aloneP50', 'aloneP99', 'besideP50', 'besideP99']) {
      expect(finitePositive(r.webhooks.isolation.median[k]), `webhooks ${k}`).toBe(true);
    }
    expect(r.targets.find((t: { name: string }) => t.name.startsWith('Webhooks: healthy endpoint p99')).met).not.toBeNull();
    // Noisy neighbour: the quiet hosts' booking emails alone, beside a flood with turns, and FIFO.
    for (const mode of ['quiet', 'fair', 'fifo']) {
      expect(r.noisy[mode].median.bookings, `noisy ${mode}`).toBe(Math.round(r.noisy.params.rate * r.noisy.params.seconds));
      expect(finitePositive(r.noisy[mode].median.p99Ms), `noisy ${mode}`).toBe(true);
    }

    expect(finitePositive(r.claim.runs.median.emptyMs)).toBe(true);
    expect(finitePositive(r.claim.runs.median.withHistoryMs)).toBe(true);
    // The plan must show the claim walking the partial index of PENDING rows: on the partition
    // that holds them, the leaf of outbox_pending_available_idx (the first partition's kept its old
    // index, <partition>_pending_available_idx; a day's is named by PostgreSQL, <partition>_available_at_id_idx).
    expect(r.claim.explain).toMatch(/Index Scan using outbox_\w+_(pending_available|available_at_id)_idx on outbox_/);

    expect(r.api.byConnections.map((c: { connections: number }) => c.connections)).toEqual([1, 8, 32]);
    for (const c of r.api.byConnections) expect(finitePositive(c.api.median.rps), `API at ${c.connections}`).toBe(true);
    expect(r.api.non201).toBe(0); // every stay asked for was free

    // Contention, what holds under any load: never two winners for one round's dates, every 201
    // a booking the database kept, every other answer a clean 409, never a 5xx. (Not "one 201
    // per round": on a busy machine a round can end with no winner, and that is no bug.)
    for (const c of r.conflicts.runs.runs) {
      expect(c.maxWinnersPerRound).toBeLessThanOrEqual(1);
      expect(c.created201).toBeLessThanOrEqual(c.rounds);
      expect(c.created201).toBe(c.bookingsKept);
      expect(c.created201 + c.conflict409).toBe(c.requests);
      expect(c.server5xx).toBe(0);
      expect(c.other).toBe(0);
    }

    if (r.versions.pgbench) {
      for (const c of r.api.byConnections) {
        expect(finitePositive(c.pgbench.median.tps), `pgbench at ${c.connections}`).toBe(true);
        expect(finitePositive(c.ratio)).toBe(true);
      }
      // The target's peer (-M prepared) at 8 connections, and the markdown says what it is.
      expect(r.api.prepared.connections).toBe(8);
      expect(finitePositive(r.api.prepared.pgbench.median.tps)).toBe(true);
      expect(finitePositive(r.api.prepared.ratio)).toBe(true);
      expect(readFileSync(path.join(out, 'bench-results.md'), 'utf8')).toContain('pgbench `-M prepared` at 8 connections');
      expect(finitePositive(r.outboxCost.ratio)).toBe(true);
      // …and the same pair prepared, as the API sends it straight to PostgreSQL.
      expect(finitePositive(r.outboxCost.prepared.ratio)).toBe(true);
      // OUTBOX_WRITES=wal's message, both ways the statements are sent.
      for (const way of ['extended', 'prepared']) expect(finitePositive(r.outboxCost.walWrites[way].median.tps), way).toBe(true);
      // One outbox row per booking or one per subscribed handler: every variant's figures, and K
      // rows of one shape write K times the index entries of one.
      for (const [key, v] of Object.entries(r.fanout.hotPath.variants) as [string, { median: Record<string, number> }][]) {
        for (const k of ['tps', 'p99', 'walBytesPerTransaction']) expect(finitePositive(v.median[k]), `fanout ${key} ${k}`).toBe(true);
      }
      const entries = r.fanout.hotPath.indexEntriesPerTransaction;
      expect(entries.none).toBe(0);
      expect(finitePositive(entries.perMessage)).toBe(true);
      for (const k of r.params.fanoutHandlers) expect(entries[`perSubscription${k}`], `fanout ${k} rows`).toBe(k * entries.perMessage);
      const needNats = (t: { name: string }) => t.name.startsWith('Relay into JetStream');
      expect(r.targets.filter((t: { name: string; met: boolean | null }) => !needNats(t) && t.met === null)).toEqual([]);
    } else {
      // Without pgbench the run says how to install it and leaves those figures out.
      expect(run.stdout).toContain('apt-get install -y postgresql-client');
      expect(r.outboxCost).toBeNull();
      expect(r.fanout.hotPath).toBeNull();
    }
    // The drain both ways, in handler runs: every figure comes out, for every K.
    expect(r.fanout.drain.byHandlers.map((d: { handlers: number }) => d.handlers)).toEqual(r.params.fanoutHandlers);
    for (const d of r.fanout.drain.byHandlers) {
      for (const side of ['perMessage', 'perSubscription']) {
        for (const k of ['effectsPerSecond', 'walBytesPerEffect'])
          expect(finitePositive(d[side].median[k]), `fanout ${side} ${k}`).toBe(true);
      }
      for (const k of ['effectsRatio', 'walRatio']) expect(finitePositive(d[k]), `fanout ${k}`).toBe(true);
    }
    // What a message writes, per system: WAL bytes, index entries and records all came out; ours,
    // the lean storage, under 5 index entries a keyed message (ADR 0051: 3.9, and 7.8 before it);
    // and ours with the index cuts under study, if any, fewer than ours as it is.
    for (const [key, w] of Object.entries(r.wal.systems) as [string, { median: Record<string, number> }][]) {
      for (const k of ['walBytes', 'indexEntries', 'records']) expect(finitePositive(w.median[k]), `wal ${key} ${k}`).toBe(true);
    }
    expect(r.wal.systems.ours.median.indexEntries).toBeLessThan(5);
    if (r.wal.systems.oursCandidates)
      expect(r.wal.systems.oursCandidates.median.indexEntries).toBeLessThan(r.wal.systems.ours.median.indexEntries);
    // A held snapshot: each system took the load and its latencies came out, before and during.
    for (const [key, h] of Object.entries(r.heldSnapshot.systems) as [string, Record<string, number>][]) {
      expect(h.produced, `held ${key}`).toBeGreaterThan(0);
      for (const k of ['p99Before', 'p99Held', 'ratio']) expect(finitePositive(h[k]), `held ${key} ${k}`).toBe(true);
    }
    // A long history: one day's DONE rows deleted row by row and dropped as a partition, each
    // taking every row of the day and nothing else, and the drop of a larger day; the drain and
    // claim alone and beside each purge; the drain and claim as the history grows; and the API on
    // a long bookings table.
    const pu = r.purge;
    expect(pu.deleteRows.median.rows).toBe(r.params.purgeRows);
    expect(finitePositive(pu.deleteRows.median.seconds)).toBe(true);
    expect(finitePositive(pu.deleteRows.median.walBytes)).toBe(true);
    expect(pu.deleteRows.median.tableBytesAfterVacuum).toBeLessThan(pu.deleteRows.median.tableBytesBefore);
    for (const [drop, rows] of [
      [pu.dropPartition.median, r.params.purgeRows],
      [pu.dropLargePartition.runs.median, r.params.purgeLargeRows],
    ]) {
      expect(drop.rows).toBe(rows);
      for (const k of ['ms', 'statsMs', 'detachMs', 'dropMs', 'walBytes', 'partitionBytes']) expect(finitePositive(drop[k]), k).toBe(true);
      // Sizes summed over the partitions: the parent alone would say 0.
      expect(drop.tableBytesBefore).toBeGreaterThan(drop.partitionBytes);
      expect(drop.tableBytesAfter).toBeLessThan(drop.tableBytesBefore - drop.partitionBytes / 2);
    }
    expect(pu.dropLargePartition.rows).toBe(r.params.purgeLargeRows);
    for (const k of ['alone', 'besideDelete', 'besideDrop']) {
      expect(finitePositive(pu.drain[k].median.perSecond), `purge drain ${k}`).toBe(true);
      expect(finitePositive(pu.claim[k].median.p99), `purge claim ${k}`).toBe(true);
    }
    for (const k of ['deleteRatio', 'dropRatio']) expect(finitePositive(pu.drain[k]), k).toBe(true);
    for (const k of ['deleteP50Ratio', 'deleteP99Ratio', 'dropP50Ratio', 'dropP99Ratio']) expect(finitePositive(pu.claim[k]), k).toBe(true);
    // The DROP beside a measurement always finishes (it is awaited) and takes the whole day: beside
    // the drain the day's every row; beside the claims, what the DELETE before it left.
    pu.claim.besideDrop.runs.forEach((drop: { purged: number }, i: number) => {
      expect(pu.drain.besideDrop.runs[i].purged).toBe(r.params.purgeRows);
      expect(pu.claim.besideDelete.runs[i].purged + drop.purged).toBe(r.params.purgeRows);
      expect(pu.drain.besideDelete.runs[i].purged).toBeLessThanOrEqual(r.params.purgeRows);
    });
    for (const k of ['besideDelete', 'besideDrop']) {
      for (const m of [pu.drain[k].median, pu.claim[k].median]) {
        expect(finitePositive(m.purgeMs), `${k} purgeMs`).toBe(true);
        expect(finitePositive(m.measuredMs), `${k} measuredMs`).toBe(true);
      }
    }
    expect(r.targets.filter((t: { name: string }) => t.name.startsWith('Purge by partition:'))).toHaveLength(3);
    expect(r.growth.byHistory.map((h: { history: number }) => h.history)).toEqual(r.params.growthHistories);
    for (const h of r.growth.byHistory) {
      for (const n of Object.keys(h.byProcesses))
        expect(finitePositive(h.byProcesses[n].median.perSecond), `growth ${h.history} ×${n}`).toBe(true);
      expect(finitePositive(h.claimMs.median.ms)).toBe(true);
    }
    expect(r.apiHistory.bookings).toBe(r.params.bookingHistory);
    expect(finitePositive(r.apiHistory.p99Ratio)).toBe(true);
    expect(r.apiHistory.non201).toBe(0);
    // Overload, with and without load shedding: what holds under any load is that nothing but a
    // 503 fails, no booking is lost or doubled, and the shedding API's 503s say overloaded and when.
    for (const c of r.overload.byConnections) {
      for (const api of ['shedding', 'without']) expect(c[api].runs, `overload ${c.connections} ${api}`).toHaveLength(1);
    }
    expect({ other5xx: r.overload.other5xx, lost: r.overload.lost, doubled: r.overload.doubled, bad503: r.overload.bad503 }).toEqual({
      other5xx: 0,
      lost: 0,
      doubled: 0,
      bad503: 0,
    });
    expect(r.targets).toHaveLength(27);
    // The versions compared are in the results.
    expect(r.versions.graphileWorker).toMatch(/^0\.17\./);
    expect(r.versions.pgBoss).toMatch(/^12\./);

    const md = readFileSync(path.join(out, 'bench-results.md'), 'utf8');
    for (const heading of [
      '## Machine and versions',
      '## Targets',
      '## 1. Drain',
      '## 1b. Idle workers',
      '## 2. Commit',
      'latency floor: a bare LISTEN/NOTIFY round trip',
      '## 3. The booking',
      '## 4. What the outbox',
      '## 4b. One outbox row per message',
      '## 5. Claim',
      '## 6. Scaling',
      '## 7. Conflicts',
      '## 8. Relaying the outbox into JetStream',
      'relay floor: the same messages from a bare JetStream client',
      '## 10. Purging a long DONE history',
      '## 11. Where the cost grows',
      '## 12. The booking write path on a long bookings history',
      '## Overload',
    ]) {
      expect(md).toContain(heading);
    }

    expect(written, 'files the smoke run created or changed in the repository').toEqual([]);
  });
});

describe("the measurement scripts' command lines", () => {
  const scripts = [
    { script: 'scripts/bench/run.ts', command: 'bench', flags: ['--smoke', '--out DIR', '--only SECTION', '--help'] },
    {
      script: 'scripts/chaos/run.ts',
      command: 'chaos',
      flags: ['--duration SECONDS', '--seed N', '--out DIR', '--concurrency N', '--keep', '--help'],
    },
    { script: 'scripts/measure-search.ts', command: 'measure:search', flags: ['--properties N', '--requests N', '--help'] },
  ];

  it.each(scripts)('$script --help prints the usage, every flag in it, and exits 0', { timeout: 130_000 }, ({ script, flags }) => {
    const run = helpOf(script);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^usage: npm run /);
    for (const flag of flags) expect(run.stdout, flag).toContain(flag);
    expect(run.stderr).toBe('');
  });

  it.each(scripts)('$script with an unknown flag names it, prints the usage and exits 2', { timeout: 130_000 }, ({ script, command }) => {
    const run = runScript(script, '--no-such-flag');
    expect(run.status, run.stderr).toBe(2);
    expect(run.stderr.split('\n')[0]).toBe(`${command}: unknown flag --no-such-flag`);
    expect(run.stderr).toContain('usage: npm run ');
    expect(run.stderr, 'no stack trace').not.toMatch(/^\s+at /m);
    expect(run.stdout).toBe('');
  });
});
