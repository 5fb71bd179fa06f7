import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import type { Config } from '../../src/config.ts';
import { createWebhookSender, type WebhookSender } from '../../src/webhooks/delivery/sender.ts';
import { recordBookingEvent } from '../../src/webhooks/fan-out.ts';
import type { Session, TestApp } from './app.ts';
import type { TestDatabase } from './db.ts';
import { startWebhookReceiver, type WebhookReceiver } from './webhook-receiver.ts';
import { workerConfig } from './worker-config.ts';
import { captureLogger } from './capture-logger.ts';
import { bookingPayload } from '../../scripts/lib/booking-payload.ts';

/** A delivery as its host reads it (GET /webhooks/endpoints/:id/deliveries). */
export interface DeliveryView {
  id: string;
  status: string;
  eventType: string;
  attempts: { responseStatus: number | null; responseBody: string | null; error: string | null }[];
}

/**
 * What the webhook tests share: receivers on 127.0.0.1 and senders, each closed by `closeAll()`
 * (call it in the file's afterEach, before anything else it resets); endpoints registered through
 * the API; booking events as the outbox's fan-out handler records them; an endpoint's deliveries
 * as its host reads them. `t` is the file's useTestApp(); the app must allow private networks,
 * since the receivers are on loopback. `senderEnv`: settings every sender of the file starts with.
 */
export function webhookKit(t: { readonly db: TestDatabase; readonly app: TestApp['app'] }, senderEnv: Record<string, string> = {}) {
  const receivers: WebhookReceiver[] = [];
  const senders: WebhookSender[] = [];

  const senderConfig = (env: Record<string, string> = {}): Config =>
    workerConfig(t.db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', ...senderEnv, ...env });

  /** A sender closed by closeAll(), not started: its start() or runUntilIdle() is the test's. */
  function sender(env: Record<string, string> = {}): WebhookSender {
    const s = createWebhookSender({ db: t.db.db, pool: t.db.pool, config: senderConfig(env), logger: captureLogger().logger });
    senders.push(s);
    return s;
  }

  return {
    senderConfig,
    sender,
    startSender: (env: Record<string, string> = {}): WebhookSender => {
      const s = sender(env);
      s.start();
      return s;
    },
    receiver: async (answer?: WebhookReceiver['answer']): Promise<WebhookReceiver> => {
      const r = await startWebhookReceiver(answer);
      receivers.push(r);
      return r;
    },
    register: async (session: Session, body: Record<string, unknown>) => {
      const res = await t.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: session.auth, payload: body });
      expect(res.statusCode, res.body).toBe(201);
      return res.json() as { id: string; secret: string; url: string; eventTypes: string[] };
    },
    /** A booking event of `propertyId`, recorded as the fan-out handler does; `created`: deliveries made. */
    bookingEvent: async (
      propertyId: string,
      type: 'booking.created' | 'booking.cancelled' = 'booking.created',
      bookingId: string = randomUUID(),
    ) => {
      const eventId = randomUUID();
      const payload = {
        ...bookingPayload({ bookingId, propertyId }),
        ...(type === 'booking.cancelled' ? { cancelledBy: 'guest' as const } : {}),
      };
      const created = await recordBookingEvent(t.db.db, { type, eventId, occurredAt: new Date(), payload });
      return { eventId, bookingId, created };
    },
    deliveries: async (session: Session, endpointId: string, status?: string): Promise<DeliveryView[]> => {
      const res = await t.app.inject({
        method: 'GET',
        url: `/webhooks/endpoints/${endpointId}/deliveries${status ? `?status=${status}` : ''}`,
        headers: session.auth,
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json().items as DeliveryView[];
    },
    closeAll: async (): Promise<void> => {
      await Promise.all(senders.splice(0).map((s) => s.stop(1000)));
      await Promise.all(receivers.splice(0).map((r) => r.close()));
    },
  };
}
