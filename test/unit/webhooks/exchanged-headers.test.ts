import { describe, expect, it } from 'vitest';
import { keptResponseHeaders } from '../../../src/webhooks/delivery/exchanged-headers.ts';

/** Header text as Node hands it over: one latin1 character a byte. */
const wire = (bytes: Buffer | string) => Buffer.from(bytes).toString('latin1');

describe("an answer's headers as they are kept", () => {
  it('keeps what PostgreSQL cannot store or a page must not obey as storable text', () => {
    const { headers } = keptResponseHeaders(['X-Bad', wire(Buffer.from([0x61, 0x00, 0x01, 0x1b, 0xff, 0xc3]))]);
    // NUL and invalid UTF-8 become U+FFFD; other control characters stay, for JSON to escape.
    expect(headers).toEqual([{ name: 'x-bad', value: 'a\uFFFD\u0001\u001b\uFFFD\uFFFD' }]);
    expect(() => JSON.parse(JSON.stringify(headers))).not.toThrow();
  });

  it('cuts a value at 1 KiB on a character boundary, a name at 128 bytes, and counts what it left out', () => {
    const value = 'ab' + '€'.repeat(400); // 2 + 1200 bytes: byte 1024 is inside the 341st €
    const raw = [wire('N'.repeat(200)), wire(value)];
    for (let i = 0; i < 40; i++) raw.push(`x-${i}`, String(i));
    const kept = keptResponseHeaders(raw);
    expect(kept.headers).toHaveLength(32);
    expect(kept.omitted).toBe(41 - 32);
    expect(kept.headers[0]!.name).toBe('n'.repeat(128));
    expect(kept.headers[0]!.value).toBe('ab' + '€'.repeat(340)); // 1022 bytes, no broken € at the end
    expect(kept.headers[0]!.omittedBytes).toBe(1202 - 1022);
    expect(kept.headers[1]).toEqual({ name: 'x-0', value: '0' });
  });
});
