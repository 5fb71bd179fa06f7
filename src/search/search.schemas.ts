import { z } from 'zod';
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
const RANK = /^-?\d+(\.\d+)?(e[-+]?\d+)?$/i;

/**
 * The cursor is opaque to clients: base64url of the last returned hit's ordering key, (rank, id)
 * when searching by text, (id) otherwise. Anything that does not decode to one is a 400.
 */
export function encodeCursor(key: IndexKey): string {
  const raw = key.rank !== undefined ? { r: key.rank, i: key.propertyId } : { i: key.propertyId };
  return Buffer.from(JSON.stringify(raw)).toString('base64url');
}

export function decodeCursor(cursor: string): IndexKey | undefined {
  try {
    const raw = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (typeof raw !== 'object' || raw === null) return undefined;
    const { r, i } = raw as { r?: unknown; i?: unknown };
    if (typeof i !== 'string' || !UUID.test(i)) return undefined;
    if (r === undefined) return { propertyId: i.toLowerCase() };
    if (typeof r !== 'string' || !RANK.test(r)) return undefined;
    return { rank: r, propertyId: i.toLowerCase() };
  } catch {
    return undefined;
  }
}

// PostgreSQL text cannot hold NUL, and no search needs control characters: refuse them here (400)
// rather than let the index reject them (which would read as the index failing).
const text = (max: number) =>
  z.string().trim().max(max).regex(/^[^\u0000-\u001f\u007f]*$/, 'must not contain control characters');

export const searchQuery = z
  .strictObject({
    q: text(200).optional(),
    city: text(100).min(1).optional(),
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
    if (p.cursor !== undefined) {
      const key = decodeCursor(p.cursor);
      if (!key) ctx.addIssue({ code: 'custom', path: ['cursor'], message: 'is not a cursor this endpoint returned' });
      // A cursor carries the ordering it came from: a text-search cursor cannot continue an id-ordered list.
      else if ((key.rank !== undefined) !== (p.q !== undefined)) {
        ctx.addIssue({ code: 'custom', path: ['cursor'], message: 'belongs to a search with a different q' });
      }
    }
  });
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
