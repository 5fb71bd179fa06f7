import { describe, expect, it } from 'vitest';
import { hostOf, isAllowedPort, isGlobalAddress } from '../../../src/webhooks/address-policy.ts';
import { storable } from '../../../src/webhooks/delivery/record.ts';
import { hasCredentials, redactUrl } from '../../../src/webhooks/redact-url.ts';

/** The address the socket would use for a URL's host, as the URL parser leaves it. */
const addressOf = (url: string) => hostOf(new URL(url));

describe('the address policy', () => {
  it('judges an IPv4 address inside IPv6 by the IPv4 address, however it is spelt', () => {
    for (const url of [
      'http://[::127.0.0.1]/', // IPv4-compatible: the parser makes it ::7f00:1
      'http://[::a9fe:a9fe]/', // 169.254.169.254
      'http://[::ffff:0:127.0.0.1]/', // IPv4-translated
      'http://[::ffff:127.0.0.1]/', // IPv4-mapped
      'http://[0:0:0:0:0:ffff:7f00:1]/',
      'http://[::ffff:10.0.0.1]/',
      'http://[64:ff9b::127.0.0.1]/', // NAT64
      'http://[64:ff9b::a9fe:a9fe]/',
      'http://[::8.8.8.8]/', // IPv4-compatible is refused even with a public address inside
      'http://[::1]/',
      'http://[::]/',
      'http://[fe80::1]/',
      'http://[fd00::1]/',
      'http://[2002:7f00:1::]/', // 6to4
    ]) {
      expect(isGlobalAddress(addressOf(url)), url).toBe(false);
    }
    for (const url of ['http://[::ffff:8.8.8.8]/', 'http://[64:ff9b::8.8.8.8]/', 'http://[2606:4700:4700::1111]/', 'http://8.8.8.8/']) {
      expect(isGlobalAddress(addressOf(url)), url).toBe(true);
    }
  });

  it('judges what a name resolves to the same way', () => {
    // What dns.lookup hands the socket's lookup for an AAAA record: not bracketed, any spelling.
    for (const a of ['::7f00:1', '::ffff:0:7f00:1', '::ffff:127.0.0.1', '127.0.0.1', '169.254.169.254', 'fe80::1%eth0']) {
      expect(isGlobalAddress(a), a).toBe(false);
    }
  });

  it("allows the web's ports: 80, 443, 1024 and up, and the extra ones a setting names", () => {
    const allowed = (url: string, extra: number[] = []) => isAllowedPort(new URL(url), extra);
    expect(allowed('http://h.example/')).toBe(true);
    expect(allowed('https://h.example/')).toBe(true);
    expect(allowed('https://h.example:443/')).toBe(true);
    expect(allowed('http://h.example:1024/')).toBe(true);
    expect(allowed('http://h.example:65535/')).toBe(true);
    expect(allowed('http://h.example:0/')).toBe(false);
    expect(allowed('http://h.example:22/')).toBe(false);
    expect(allowed('http://h.example:25/')).toBe(false);
    expect(allowed('http://h.example:1023/')).toBe(false);
    expect(allowed('http://h.example:25/', [25])).toBe(true);
    expect(allowed('http://h.example:0/', [0])).toBe(false);
  });
});

describe('what we store and show', () => {
  it('hides the user name and password of a URL, and nothing else', () => {
    expect(redactUrl('https://bob:hunter2@h.example/x?y=1')).toBe('https://redacted@h.example/x?y=1');
    expect(redactUrl('https://token@h.example/')).toBe('https://redacted@h.example/');
    expect(redactUrl('https://h.example/a?b=c')).toBe('https://h.example/a?b=c');
    expect(hasCredentials('https://:pw@h.example/')).toBe(true);
    expect(hasCredentials('https://h.example/')).toBe(false);
  });

  it('stores a NUL as U+FFFD and leaves other text alone', () => {
    expect(storable('a\u0000b')).toBe('a\uFFFDb');
    expect(storable('ok ✓')).toBe('ok ✓');
    expect(storable(null)).toBeNull();
  });
});
