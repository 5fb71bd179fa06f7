import { ApiClient } from './client.ts';
import type { Flags } from './flags.ts';
import { FaultInjector } from './faults/injector.ts';
import { planFaults } from './faults/plan.ts';
import { Load } from './load.ts';
import { pendingOfTopics } from '../../src/outbox/index.ts';
import { poll } from './poll.ts';
import type { Rng } from './rng.ts';
import { retryWindowMs } from './settings.ts';
import type { ChaosStack, Say } from './stack.ts';
import { ChaosWebhooks } from './webhooks.ts';

/*
 * The chaos run's middle: the load's users and properties and the webhook receivers set up, then
 * the load for --duration while the faults drawn from the seed are injected, then the workers
 * left to drain (bounded).
 */

/** The load's users and properties, and webhook receivers for some of the hosts, registered before any booking. */
async function setUp(stack: ChaosStack, flags: Flags, rng: { load: Rng; webhooks: Rng }, say: Say) {
  const client = new ApiClient(stack.apiUrl);
  const load = new Load({
    api: client,
    rng: rng.load,
    hosts: 6,
    guests: 16,
    bounceEmails: stack.bounceEmails,
    concurrency: flags.concurrency,
    thinkMs: [20, 120],
    runTag: String(flags.seed),
  });
  await load.setup();
  // Webhook receivers for some of the hosts (scripts/chaos/webhooks.ts).
  const hooks = new ChaosWebhooks(rng.webhooks);
  await hooks.start();
  await hooks.register(client, load.hosts());
  say(`set up ${load.users.length} users and ${load.properties.length} properties; webhook receivers: flaky, down, slow`);
  return { client, load, hooks };
}

/** Puts the load on the stack while the faults are injected; then waits until the workers drained (bounded). */
export async function drive(
  stack: ChaosStack,
  flags: Flags,
  rng: { faults: Rng; load: Rng; webhooks: Rng },
  onHooks: (hooks: ChaosWebhooks) => void,
  say: Say,
) {
  const { client, load, hooks } = await setUp(stack, flags, rng, say);
  onHooks(hooks);
  const durationMs = flags.durationSeconds * 1000;
  const maxOutageMs = Math.floor(retryWindowMs() / 2);
  const plan = planFaults(rng.faults, {
    durationMs,
    workers: stack.workers.length,
    maxSmtpOutageMs: maxOutageMs,
    events: stack.ev ? { maxNatsOutageMs: maxOutageMs } : undefined,
  }).filter((f) => !flags.onlyFaults || flags.onlyFaults.includes(f.kind));
  // What the injector acts on: the stack's processes (workers, API, SMTP server and their waits), the events path when it runs.
  const injector = new FaultInjector({
    ...stack,
    postgres: stack.postgres!.pg,
    admin: stack.admin!,
    events: stack.ev,
    // Longer than the longest backoff (BACKOFF_MAX_SECONDS) plus a publish timeout: every message
    // gets an attempt between an SMTP outage and a NATS one.
    downstreamGapMs: maxOutageMs,
    log: say,
  });
  const loadStart = Date.now();
  say(`load for ${flags.durationSeconds} s with ${plan.length} faults planned`);
  injector.start(plan);
  // The "down" receiver refuses connections for a window in the middle of the load.
  hooks.scheduleDownWindow(Math.round(durationMs * 0.3), Math.min(30_000, Math.round(durationMs * 0.2)));
  await load.run(durationMs);
  const loadEnd = Date.now();
  say(`load done: ${load.figures.bookingsCreated} bookings, ${load.figures.cancellations} cancellations; waiting for faults in progress`);
  await injector.settle();
  // Every process up again (a fault may have ended with one still restarting).
  await stack.waitApiUp();
  await stack.waitSmtpUp();
  stack.workers.forEach((w) => w.start());
  // When nothing the workers handle was PENDING any more; null: not within the bound.
  const noneLeft = async () => ((await pendingOfTopics(stack.admin!, stack.handledTopics)).pending === 0 ? Date.now() : undefined);
  const drainedAt = (await poll(noneLeft, Date.now() + Math.max(120_000, durationMs), 250)) ?? null;
  say(drainedAt ? `drained ${((drainedAt - loadEnd) / 1000).toFixed(1)} s after the load` : 'NOT drained within the bound');
  return { client, load, hooks, plan, injector, loadStart, loadEnd, drainedAt };
}

export type Driven = Awaited<ReturnType<typeof drive>>;
