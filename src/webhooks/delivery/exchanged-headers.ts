/*
 * The headers of one attempt that are kept beside it (webhook_attempts.headers), so the host sees
 * what the receiver got and what it answered without the receiver's logs: the request's Standard
 * Webhooks headers exactly as sent, and the response's headers, bounded and made storable.
 *
 * The bounds: Node's HTTP client already refuses a response head over 16 KiB, so no attempt can
 * keep more than that; these bounds keep a usual answer whole and cut only garbage. 32 headers
 * (a web server, a CDN and an application together send 10 to 20), names of at most 128 bytes
 * (a field name is a token; real ones are under 40), values of at most 1 KiB (the portal shows a
 * body's first KiB too; a longer value is a cookie or a blob, and its start is what tells).
 */

/** The request headers a receiver verifies: kept as sent, since the portal shows what was signed. */
export const SIGNED_HEADERS = ['webhook-id', 'webhook-timestamp', 'webhook-signature'] as const;

export const RESPONSE_HEADERS_KEPT = 32;
export const HEADER_NAME_KEEP = 128;
export const HEADER_VALUE_KEEP = 1024;

export interface KeptHeader {
  name: string;
  value: string;
  /** Bytes of the value left out past HEADER_VALUE_KEEP; absent when it is whole. */
  omittedBytes?: number;
}

export interface KeptResponseHeaders {
  headers: KeptHeader[];
  /** Headers left out past RESPONSE_HEADERS_KEPT. */
  omitted: number;
}

/** What webhook_attempts.headers holds: null parts when there was nothing (no answer). */
export interface ExchangedHeaders {
  request: Record<string, string> | null;
  response: KeptResponseHeaders | null;
}

/** The signed headers among those a request carries. */
export function signedHeaders(sent: Readonly<Record<string, string>>): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const name of SIGNED_HEADERS) if (sent[name] !== undefined) kept[name] = sent[name];
  return kept;
}

/*
 * Node hands raw header text over as latin1, one character a byte: the bytes are taken back and
 * decoded as UTF-8, so invalid UTF-8 becomes U+FFFD and never a lone surrogate (which jsonb
 * refuses). A cut is moved back to a character's start (at most 3 bytes) so that a whole
 * character is not shown as U+FFFD. NUL, which neither text nor jsonb can hold, becomes U+FFFD
 * as in the body; other control characters are kept (JSON escapes them; the portal shows them).
 */
function keptText(latin1: string, keep: number): { text: string; omittedBytes: number } {
  const bytes = Buffer.from(latin1, 'latin1');
  let end = Math.min(bytes.length, keep);
  for (let back = 0; end < bytes.length && back < 3 && end > 0 && (bytes[end]! & 0xc0) === 0x80; back++) end--;
  return { text: bytes.subarray(0, end).toString('utf8').replaceAll('\u0000', '\uFFFD'), omittedBytes: bytes.length - end };
}

/** A response's headers (IncomingMessage#rawHeaders: name, value, name, value …) as they are kept. */
export function keptResponseHeaders(raw: readonly string[]): KeptResponseHeaders {
  const headers: KeptHeader[] = [];
  const count = Math.floor(raw.length / 2);
  for (let i = 0; i < Math.min(count, RESPONSE_HEADERS_KEPT); i++) {
    const name = keptText(raw[2 * i]!, HEADER_NAME_KEEP).text.toLowerCase();
    const value = keptText(raw[2 * i + 1]!, HEADER_VALUE_KEEP);
    headers.push(value.omittedBytes ? { name, value: value.text, omittedBytes: value.omittedBytes } : { name, value: value.text });
  }
  return { headers, omitted: Math.max(0, count - RESPONSE_HEADERS_KEPT) };
}
