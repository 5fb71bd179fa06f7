import type pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { startWebhookReceiver, type Answer, type ReceivedWebhook, type WebhookReceiver } from '../lib/webhook-receiver.ts';
import type { ApiClient } from './client.ts';
import type { User } from './load.ts';
import { poll } from './poll.ts';
import type { Rng } from './rng.ts';
import { checkResult, WEBHOOK_CHECKS, type CheckResult } from './checks.ts';

/*
 * The webhooks part of the chaos run: three receivers of hosts' endpoints, each misbehaving its own
 * way while the workers are killed and PostgreSQL restarts —
 *   flaky  answers 500 to a share of requests (seeded);
 *   down   refuses connections for a window in the middle of the load;
 *   slow   answers after 0.3–2.5 s, and now and then after longer than WEBHOOK_TIMEOUT_MS;
 * and, after the drain, three checks (names in checks.ts WEBHOOK_CHECKS):
 *   owed      every booking event owed to every subscribed endpoint (its host's bookings made
 *             and cancelled, from the bookings table) arrived at least once with a valid signature
 *   not owed  nothing arrived that was not owed, and no signature failed to verify
 *   settled   no delivery is left pending or failed: the schedule delivered everything
 */

/** The worker's webhook settings for the run: a short schedule, so every retry fits in the drain. */
export const WEBHOOK_ENV = {
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.5,1,2,4,4,4,4,4,4,4',
  WEBHOOK_TIMEOUT_MS: '3000',
  WEBHOOK_CONNECT_TIMEOUT_MS: '1000',
};

/** How each receiver answers (`down` answers at once, while it listens). */
const ANSWERS = {
  flaky: (rng: Rng) => ({ status: rng.chance(0.3) ? 500 : 204, delayMs: 0 }),
  down: (_rng: Rng) => ({ status: 204, delayMs: 0 }),
  slow: (rng: Rng) => ({ status: 204, delayMs: rng.chance(0.05) ? 4_000 : Math.round(rng.between(300, 2_500)) }),
};
type Behaviour = keyof typeof ANSWERS;
type Endpoint = { id: string; secret: string; behaviour: Behaviour; hostEmail: string };

/** One of the shared receivers (scripts/lib/webhook-receiver.ts), misbehaving its way, stood up again on its port after a down window. */
class Receiver {
  readonly receipts: { endpointId: string; webhookId: string; type: string; bookingId: string | null; valid: boolean }[] = [];
  private server: WebhookReceiver | undefined;
  port = 0;
  readonly endpoints = new Map<string, Endpoint>(); // path → endpoint
  requests = 0;

  constructor(
    readonly behaviour: Behaviour,
    private readonly rng: Rng,
  ) {}

  async listen(): Promise<void> {
    this.server = await startWebhookReceiver((_n, req) => this.handle(req), { port: this.port, record: false });
    this.port = Number(new URL(this.server.origin).port);
  }

  /** Stops accepting connections (the "down" window); requests in flight are cut. */
  async close(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    await s?.close();
  }

  private handle(req: ReceivedWebhook): Answer {
    this.requests++;
    const endpoint = this.endpoints.get(req.path);
    if (!endpoint) return { status: 404 };
    let valid = true;
    let parsed: { type?: string; data?: { bookingId?: string } } = {};
    try {
      parsed = new Webhook(endpoint.secret).verify(req.body, req.headers as Record<string, string>) as typeof parsed;
    } catch {
      valid = false;
      try {
        parsed = JSON.parse(req.body) as typeof parsed;
      } catch {
        /* not JSON */
      }
    }
    const answer = ANSWERS[this.behaviour](this.rng);
    // Recorded as received only when answered 2xx: what a real receiver would have processed.
    const receipt = {
      endpointId: endpoint.id,
      webhookId: String(req.headers['webhook-id'] ?? ''),
      type: parsed.type ?? '?',
      bookingId: parsed.data?.bookingId ?? null,
      valid,
    };
    return { ...answer, onSent: answer.status < 300 ? () => this.receipts.push(receipt) : undefined };
  }
}

export class ChaosWebhooks {
  private readonly receivers: Record<Behaviour, Receiver>;
  private readonly endpoints: Endpoint[] = [];
  private downTimer: NodeJS.Timeout | undefined;
  private downMs = 0;
  figures: ReturnType<ChaosWebhooks['countFigures']> | undefined;

  constructor(rng: Rng) {
    const receiver = (b: Behaviour) => new Receiver(b, rng.fork(b));
    this.receivers = { flaky: receiver('flaky'), down: receiver('down'), slow: receiver('slow') };
  }

  async start(): Promise<void> {
    await Promise.all(Object.values(this.receivers).map((r) => r.listen()));
  }

  /**
   * Endpoints for four of the hosts: one each on the flaky, down and slow receivers, and one host
   * with two (flaky and slow). The others have none: nothing may arrive for their bookings.
   */
  async register(api: ApiClient, hosts: User[]): Promise<void> {
    const plan: [number, Behaviour][] = [
      [0, 'flaky'],
      [1, 'down'],
      [2, 'slow'],
      [3, 'flaky'],
      [3, 'slow'],
    ];
    for (const [i, behaviour] of plan) {
      const host = hosts[i];
      if (!host) continue;
      const receiver = this.receivers[behaviour];
      const path = `/hooks/${this.endpoints.length}`;
      const res = await api.call('POST', '/webhooks/endpoints', {
        token: host.token,
        body: { url: `http://127.0.0.1:${receiver.port}${path}`, description: `chaos ${behaviour}` },
        route: 'POST /webhooks/endpoints',
      });
      if (res.status !== 201) throw new Error(`register webhook endpoint: ${res.status} ${JSON.stringify(res.body)}`);
      const e = { id: res.body.id as string, secret: res.body.secret as string, behaviour, hostEmail: host.email };
      receiver.endpoints.set(path, e);
      this.endpoints.push(e);
    }
  }

  /** The "down" receiver refuses connections from `afterMs` for `forMs`. */
  scheduleDownWindow(afterMs: number, forMs: number): void {
    this.downMs = forMs;
    this.downTimer = setTimeout(() => {
      void this.receivers.down.close().then(() => {
        this.downTimer = setTimeout(() => void this.receivers.down.listen(), forMs);
      });
    }, afterMs);
  }

  /** Waits (bounded) until no delivery is pending. */
  async drain(db: pg.Pool, deadline: number): Promise<boolean> {
    const pending = async () =>
      (await db.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'pending'`)).rows[0]!.n;
    return (await poll(async () => ((await pending()) === 0 ? true : undefined), deadline, 250)) ?? false;
  }

  async check(db: pg.Pool): Promise<CheckResult[]> {
    // What is owed, from the bookings table: an endpoint gets the events that happened after it
    // was registered (a booking's creation and cancellation each commit with their event, at the
    // time the table records; the load's set-up books a few before the endpoints exist).
    const { rows } = await db.query<{ endpoint_id: string; booking_id: string; created: boolean; cancelled: boolean }>(`
      select e.public_id as endpoint_id, b.public_id as booking_id,
             b.created_at >= e.created_at as created,
             b.status = 'cancelled' and b.cancelled_at >= e.created_at as cancelled
        from webhook_endpoints e
        join properties p on p.host_id = e.host_id
        join bookings b on b.property_id = p.id`);
    const owed = new Set<string>();
    for (const r of rows) {
      if (r.created) owed.add(`${r.endpoint_id} booking.created ${r.booking_id}`);
      if (r.cancelled) owed.add(`${r.endpoint_id} booking.cancelled ${r.booking_id}`);
    }
    const receipts = Object.values(this.receivers).flatMap((r) => r.receipts);
    const got = new Set(receipts.filter((r) => r.valid).map((r) => `${r.endpointId} ${r.type} ${r.bookingId}`));

    const missing = [...owed].filter((k) => !got.has(k)).map((k) => `never arrived: ${k}`);
    const unowed = [
      ...receipts.filter((r) => !r.valid).map((r) => `signature did not verify: ${r.endpointId} ${r.type} ${r.bookingId} (${r.webhookId})`),
      ...[...got].filter((k) => !owed.has(k)).map((k) => `not owed: ${k}`),
    ];
    const { rows: left } = await db.query<{ status: string; n: number }>(
      `select status, count(*)::int as n from webhook_deliveries where status <> 'succeeded' group by status`,
    );
    const unsettled = left.map((l) => `${l.n} deliveries ${l.status}`);
    this.figures = this.countFigures(owed.size, got.size);
    return [
      checkResult(WEBHOOK_CHECKS.owed, missing),
      checkResult(WEBHOOK_CHECKS.notOwed, unowed),
      checkResult(WEBHOOK_CHECKS.settled, unsettled),
    ];
  }

  private countFigures(owed: number, receivedValid: number) {
    const { flaky, down, slow } = this.receivers;
    const requests = { flaky: flaky.requests, down: down.requests, slow: slow.requests };
    return { endpoints: this.endpoints.length, owed, receivedValid, requests, downWindowSeconds: Math.round(this.downMs / 1000) };
  }

  async stop(): Promise<void> {
    clearTimeout(this.downTimer);
    await Promise.all(Object.values(this.receivers).map((r) => r.close()));
  }
}
