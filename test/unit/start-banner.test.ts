import { describe, expect, it } from 'vitest';
import { bannerLines } from '../../src/process/start-console.ts';

/* `npm start`'s ready banner: an Events line only when NATS_URL is set, never a password, and a warning when webhooks may call private addresses. */

const base = { HOST: '127.0.0.1', PORT: 3000, SMTP_URL: undefined, MAIL_DIR: 'var/mail', WEBHOOK_ALLOW_PRIVATE_NETWORKS: false };

describe('npm start banner', () => {
  it('has no Events line without NATS_URL', () => {
    const lines = bannerLines({ ...base, NATS_URL: undefined }, '/srv');
    expect(lines.some((l) => l.includes('Events'))).toBe(false);
    expect(lines.at(-1)).toBe('  Stop       Ctrl-C (the worker and the API finish what they are doing; twice: at once)');
  });

  it('names the NATS server, the relay and the consumer with NATS_URL, without credentials', () => {
    const lines = bannerLines({ ...base, NATS_URL: 'nats://relay:s3cret@127.0.0.1:4222' }, '/srv');
    expect(lines).toContain('  Events     NATS_URL=nats://127.0.0.1:4222 (relay in the worker; earnings consumer running)');
    expect(lines.join('\n')).not.toContain('s3cret');
    expect(lines.at(-1)).toMatch(/^ {2}Stop {7}Ctrl-C \(the consumer, the worker and the API finish/);
  });

  it("names each of a cluster's servers, without credentials", () => {
    const lines = bannerLines({ ...base, NATS_URL: 'nats://relay:s3cret@n1:4222,nats://relay:s3cret@n2:4222' }, '/srv');
    expect(lines).toContain('  Events     NATS_URL=nats://n1:4222,nats://n2:4222 (relay in the worker; earnings consumer running)');
    expect(lines.join('\n')).not.toContain('s3cret');
  });

  it('says when webhooks may call loopback and private addresses, and only then', () => {
    expect(bannerLines({ ...base, NATS_URL: undefined }, '/srv').some((l) => l.includes('WEBHOOK_ALLOW_PRIVATE_NETWORKS'))).toBe(false);
    const lines = bannerLines({ ...base, NATS_URL: undefined, WEBHOOK_ALLOW_PRIVATE_NETWORKS: true }, '/srv');
    expect(lines.find((l) => l.startsWith('  Webhooks'))).toMatch(/WEBHOOK_ALLOW_PRIVATE_NETWORKS=true: .*development only/);
  });
});
