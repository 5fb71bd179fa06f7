import { z } from 'zod';
import { AppError } from '../errors.ts';
import { singleLineText } from '../validation.ts';
import { isoDate, propertyResponse } from '../properties/properties.schemas.ts';
import type { IndexKey } from './search-index.ts';

/*
 * GET /search. Query-string values arrive as strings: numbers are parsed strictly (digits only —
 * `guests=` or `guests=2.5` or `guests=1e3` is a 400, not a silent 0 or 1000), unknown parameters
 * are refused, and anything wrong is a 400 problem+json listing each bad field.
 */

const MAX_PRICE = 10_000_000; // the same ceiling as a property's price (minor units)

const digits = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d{1,9}$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const RANK = /^\d{1,20}(\.\d{1,20})?(e[-+]?\d{1,3})?$/i;
/** float4's range: the index compares the cursor's rank as `real`, which refuses anything outside it. */
const FLOAT4_MAX = 3.4028234663852886e38;
const FLOAT4_MIN_NORMAL = 1.1754943508222875e-38;

/**
 * A rank as the index printed it (`ts_rank_cd(...)::text`): a non-negative float4. Checked by
 * value, not only by shape: "1e99" has the shape of a number but is out of range for `real`, and
 * PostgreSQL would refuse it as a data error (22003) in the middle of the search.
 */
function isRank(r: string): boolean {
  if (!RANK.test(r)) return false;
  const n = Number(r);
  return Number.isFinite(n) && (n === 0 || (n >= FLOAT4_MIN_NORMAL && n <= FLOAT4_MAX));
}

/**
 * The cursor is opaque to clients: base64url of the last returned hit's ordering key, (rank, id)
 * when searching by text, (id) otherwise. Anything that does not decode to one is a 400.
 */
export function encodeSearchCursor(key: IndexKey): string {
  const raw = key.rank !== undefined ? { r: key.rank, i: key.propertyId } : { i: key.propertyId };
  return Buffer.from(JSON.stringify(raw)).toString('base64url');
}

export function decodeSearchCursor(cursor: string): IndexKey | undefined {
  try {
    const raw = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (typeof raw !== 'object' || raw === null) return undefined;
    const { r, i } = raw as { r?: unknown; i?: unknown };
    if (typeof i !== 'string' || !UUID.test(i)) return undefined;
    if (r === undefined) return { propertyId: i.toLowerCase() };
    if (typeof r !== 'string' || !isRank(r)) return undefined;
    return { rank: r, propertyId: i.toLowerCase() };
  } catch {
    return undefined;
  }
}

/**
 * The ordering key a cursor stands for, or an `invalid_cursor` error (400) naming the field. A
 * cursor carries the ordering it came from: a text-search cursor cannot continue an id-ordered list.
 */
export function cursorKey(cursor: string, q: string | undefined): IndexKey {
  const key = decodeSearchCursor(cursor);
  const refuse = (message: string) => new AppError('invalid_cursor', undefined, [{ path: 'querystring.cursor', message }]);
  if (!key) throw refuse('is not a cursor this endpoint returned');
  if ((key.rank !== undefined) !== (q !== undefined)) throw refuse('belongs to a search with a different q');
  return key;
}

// PostgreSQL text cannot hold NUL, and no search needs control characters: refuse them here (400)
// rather than let the index reject them (which would read as the index failing).
const text = (min: number, max: number) => singleLineText(min, max);

export const searchQuery = z
  .strictObject({
    q: text(0, 200).optional(),
    city: text(1, 100).optional(),
    country: z
      .string()
      .regex(/^[A-Za-z]{2}$/, 'must be an ISO 3166-1 alpha-2 code')
      .transform((c) => c.toUpperCase())
      .optional(),
    guests: digits(1, 100).optional(),
    checkIn: isoDate.optional(),
    checkOut: isoDate.optional(),
    minPrice: digits(0, MAX_PRICE).optional(),
    maxPrice: digits(0, MAX_PRICE).optional(),
    limit: digits(1, 100).default(20),
    cursor: z.string().max(500).optional(),
  })
  // An empty q means "no text": the same as leaving it out.
  .transform(({ q, ...rest }) => ({ ...rest, q: q === '' ? undefined : q }))
  .superRefine((p, ctx) => {
    if ((p.checkIn === undefined) !== (p.checkOut === undefined)) {
      ctx.addIssue({ code: 'custom', path: [p.checkIn ? 'checkOut' : 'checkIn'], message: 'checkIn and checkOut go together' });
    }
    if (p.checkIn && p.checkOut) {
      if (p.checkOut <= p.checkIn) ctx.addIssue({ code: 'custom', path: ['checkOut'], message: 'must be after checkIn' });
      else if ((Date.parse(p.checkOut) - Date.parse(p.checkIn)) / 86_400_000 > 366) {
        ctx.addIssue({ code: 'custom', path: ['checkOut'], message: 'stay must be at most 366 nights' });
      }
    }
    if (p.minPrice !== undefined && p.maxPrice !== undefined && p.minPrice > p.maxPrice) {
      ctx.addIssue({ code: 'custom', path: ['maxPrice'], message: 'must not be below minPrice' });
    }
  });
// The cursor is checked by the service (`cursorKey`), which answers `invalid_cursor`.
export type SearchQuery = z.infer<typeof searchQuery>;

export const searchResponse = z.object({
  items: z.array(
    z.object({
      property: propertyResponse,
      /** ts_rank_cd relevance when q was given (higher is better); null when not. */
      rank: z.number().nullable(),
    }),
  ),
  /** Pass as `cursor` for the next page; null when there is none. */
  nextCursor: z.string().nullable(),
});
export type SearchResponse = z.infer<typeof searchResponse>;
