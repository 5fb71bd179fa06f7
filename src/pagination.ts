import { AppError } from './errors.ts';

/*
 * The keyset cursor every list of ours uses (bookings, webhook endpoints and deliveries, the
 * admin's outbox messages): the last item's public id, base64url-encoded. Opaque to clients; a
 * page never repeats or skips an item when new ones arrive.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const encodeCursor = (publicId: string): string => Buffer.from(publicId).toString('base64url');

/** The public id a cursor holds, or undefined when it is not a cursor a list returned. */
export function publicIdOfCursor(cursor: string): string | undefined {
  const publicId = Buffer.from(cursor, 'base64url').toString();
  return UUID.test(publicId) ? publicId : undefined;
}

/** The public id a cursor holds; a 400 `invalid_cursor` naming querystring.cursor otherwise. */
export function decodeCursor(cursor: string): string {
  const publicId = publicIdOfCursor(cursor);
  if (publicId === undefined) {
    throw new AppError('invalid_cursor', undefined, [{ path: 'querystring.cursor', message: 'is not a cursor this endpoint returned' }]);
  }
  return publicId;
}
