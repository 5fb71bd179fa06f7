import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { onParentGone } from '../../src/process/lifeline.ts';
import { collect } from './collect.ts';
import { drive } from './drive.ts';
import { NATS_INSTALL_HINT, natsServerAvailable } from '../lib/nats.ts';
import { readFlags, type Flags } from './flags.ts';
import { writeReport } from './report.ts';
import { buildResults, gitVersion } from './results.ts';
import { Rng } from './rng.ts';
import { sampleOutbox } from './sampler.ts';
import { ChaosStack, type Say } from './stack.ts';
import type { JudgeInput } from './evidence.ts';
import { judge } from './verdict.ts';
import type { ChaosWebhooks } from './webhooks.ts';

/*
 * `npm run chaos -- [--duration 60] [--seed N] [--out DIR] [--concurrency 6] [--keep]` (USAGE in flags.ts)
 *
 * Runs the real system on this machine (stack.ts) — embedded Postgres, the API process, two
 * outbox worker processes, a real SMTP server in a process of its own and, when nats-server is
 * installed, the events path (the workers relay into a NATS JetStream of the run's own, the
 * earnings consumer reads it: scripts/chaos/events/) — puts load on it while injecting the faults
 * drawn from --seed, lets the workers drain (drive.ts), then gathers the evidence (collect.ts,
 * gather.ts), judges it (verdict.ts, by the rules in rules/) and writes chaos-results.json and
 * chaos-results.md to --out (results.ts, report.ts; default var/chaos/SEED/, git-ignored). Exit
 * code 0 only if every invariant held; 1 if one broke; 2 for bad flags or a harness failure.
 *
 * Everything is on loopback, on free ports, in a temporary folder: it never touches the
 * developer's database or `npm start`'s ports. The folder (with every process's log, and the
 * judge's input as judge-input.json) is deleted after a passing run and kept, with its path
 * printed, after a failing one; `npm run chaos -- --judge <folder>/judge-input.json` judges that
 * evidence again without starting anything.
 */

/**
 * Whether the events path runs: it needs nats-server. Without it a developer's run says it skips
 * that part; CI (CI=true) must not pass by checking less: null, exit 2.
 */
function eventsPart(say: Say): boolean | null {
  if (natsServerAvailable()) return true;
  if (/^(1|true)$/i.test(process.env.CI ?? '')) {
    process.stderr.write(`chaos: ${NATS_INSTALL_HINT}. CI=true: refusing to skip the events part.\n`);
    return null;
  }
  say(`SKIPPING THE EVENTS PART (JetStream relay, earnings consumer, their faults and checks): ${NATS_INSTALL_HINT}`);
  return false;
}

/** Runs the stack, the load with its faults, then judges and reports: the exit code. */
async function runChaos(flags: Flags, stack: ChaosStack, withEvents: boolean, t0: number, say: Say, parts: { hooks?: ChaosWebhooks }) {
  const code = gitVersion();
  const rng = new Rng(flags.seed);
  // 1. start the parts
  await stack.start(rng.fork('smtp').int(1, 2 ** 30), withEvents, flags.outboxWrites);
  const sampler = sampleOutbox(stack.admin!, stack.handledTopics);
  // 2. the load and the faults, then the drain
  const rngs = { faults: rng.fork('faults'), load: rng.fork('load'), webhooks: rng.fork('webhooks') };
  let driven;
  try {
    driven = await drive(stack, flags, rngs, (hooks) => (parts.hooks = hooks), say);
  } finally {
    sampler.stop();
  }
  // 3. gather the evidence (the API is still up for the clients' look-ups)
  const collected = await collect(stack, driven, flags.durationSeconds, say);
  // Kept with the logs (after a failure, or with --keep): `--judge` judges it again.
  writeFileSync(path.join(stack.dir, 'judge-input.json'), JSON.stringify(collected.input));
  // 4. judge
  const verdict = judge(collected.input);
  // 5. report
  const results = buildResults({ ...flags, t0, code, stack, driven, collected, verdict, samples: sampler.samples });
  process.stdout.write(`\n${writeReport(flags.out, results)}\n`);
  await stack.stop();
  if (results.ok && !flags.keep) rmSync(stack.dir, { recursive: true, force: true });
  else say(`logs and data kept in ${stack.dir}`);
  say(results.ok ? 'PASS: every invariant held' : 'FAIL: an invariant broke (see above)');
  return results.ok ? 0 : 1;
}

/** `--judge FILE`: a kept run's evidence judged again, the verdict printed as JSON. */
function judgeAgain(file: string): number {
  let input: JudgeInput;
  try {
    input = JSON.parse(readFileSync(file, 'utf8')) as JudgeInput;
  } catch (err) {
    process.stderr.write(`chaos: --judge ${file}: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  }
  const verdict = judge(input);
  process.stdout.write(`${JSON.stringify(verdict, null, 2)}\n`);
  return verdict.ok ? 0 : 1;
}

async function main(): Promise<number> {
  const flags = readFlags(process.argv.slice(2));
  if (flags.judge) return judgeAgain(flags.judge);
  const t0 = Date.now();
  const say: Say = (msg) => process.stdout.write(`[chaos +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
  say(`seed ${flags.seed}, duration ${flags.durationSeconds} s, results to ${flags.out}`);
  const withEvents = eventsPart(say);
  if (withEvents === null) return 2;
  const stack = ChaosStack.prepare(flags.seed, say);
  const parts: { hooks?: ChaosWebhooks } = {};
  let interrupted = false;
  const interrupt = (why: string) => {
    if (interrupted) return;
    interrupted = true;
    say(`${why}: stopping everything`);
    void stack.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', () => interrupt('interrupted'));
  // Whoever started the run (npm, a test) gone: stop the stack rather than leave it running. If
  // this process is SIGKILLed instead, its children see it go (processes.ts), and PostgreSQL's and
  // nats-server's watchdogs stop them (src/db/orphan-watchdog.ts).
  onParentGone(() => interrupt('the process that started the run is gone'), { name: 'chaos' });
  try {
    return await runChaos(flags, stack, withEvents, t0, say, parts);
  } catch (err) {
    if (interrupted) return 130;
    process.stderr.write(`chaos: harness failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    await stack.stop();
    process.stderr.write(`chaos: logs kept in ${stack.dir}\n`);
    return 2;
  } finally {
    // Whatever happened above: nats-server and the consumer are never left running.
    await stack.ev?.stop().catch(() => {});
    await parts.hooks?.stop().catch(() => {});
  }
}

// main() answers with an exit code; were it to throw, Node would report the rejection and exit 1.
void main().then((code) => process.exit(code));
