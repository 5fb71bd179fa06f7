import { createHmac, randomBytes } from 'node:crypto';

/*
 * Signing as the Standard Webhooks specification has it (https://www.standardwebhooks.com): the
 * secret is `whsec_` + base64 of random bytes, and each signature is
 * `v1,` + base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")), the key being the
 * secret's decoded bytes. Several signatures are space-separated: during a rotation the old and
 * the new secret both sign, and a receiver that knows either one accepts the message.
 */

const PREFIX = 'whsec_';

/** 32 random bytes: more than the specification's minimum of 24. */
export function newSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

function keyOf(secret: string): Buffer {
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
}

export function sign(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac('sha256', keyOf(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}

/** The `webhook-signature` header: one signature per live secret. */
export function signatureHeader(secrets: readonly string[], id: string, timestampSeconds: number, body: string): string {
  return secrets.map((s) => sign(s, id, timestampSeconds, body)).join(' ');
}
