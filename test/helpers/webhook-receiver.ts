// The tests' webhook endpoint is the one the bench and the chaos run use.
export { startWebhookReceiver, type Answer, type ReceivedWebhook, type WebhookReceiver } from '../../scripts/lib/webhook-receiver.ts';
