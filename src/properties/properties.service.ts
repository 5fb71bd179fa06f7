import type { Db } from '../db/client.ts';
import { withTransaction, type Tx } from '../db/transaction.ts';
import { AppError } from '../errors.ts';
import { enqueueTopic } from '../messages/enqueue.ts';
import type { UserRow } from '../users/users.repository.ts';
import * as repo from './properties.repository.ts';
import type { PropertyBody, PropertyPatchBody, PropertyResponse } from './properties.schemas.ts';

export function toPropertyResponse(p: repo.PropertyRow, hostPublicId: string): PropertyResponse {
  return {
    id: p.publicId,
    hostId: hostPublicId,
    title: p.title,
    description: p.description,
    city: p.city,
    country: p.country,
    currency: p.currency,
    nightlyPrice: p.nightlyPrice,
    cleaningFee: p.cleaningFee,
    maxGuests: p.maxGuests,
    active: p.active,
    createdAt: p.createdAt.toISOString(),
    updatedAt: p.updatedAt.toISOString(),
  };
}

/** Hooks run after a property change commits (the search index's direct write, see src/search). */
export type AfterPropertyCommit = (propertyPublicId: string) => Promise<void> | void;

export interface PropertyDeps {
  db: Db;
  afterPropertyCommit?: AfterPropertyCommit;
}

/** Grouped by host: a host's bulk edit takes turns with other hosts' work in the worker (ADR 0033). */
function writePropertyChanged(tx: Tx, publicId: string, reason: 'created' | 'updated', hostPublicId: string) {
  return enqueueTopic(tx, 'property.changed', { propertyId: publicId, reason }, { key: publicId, group: hostPublicId });
}

export async function createProperty(deps: PropertyDeps, host: UserRow, body: PropertyBody) {
  if (host.role !== 'host') throw new AppError('forbidden', 'Only hosts can list properties');
  const property = await withTransaction(deps.db, async (tx) => {
    const row = await repo.insertProperty(tx, { ...body, hostId: host.id });
    await writePropertyChanged(tx, row.publicId, 'created', host.publicId);
    return row;
  });
  await deps.afterPropertyCommit?.(property.publicId);
  return toPropertyResponse(property, host.publicId);
}

export async function updateProperty(deps: PropertyDeps, user: UserRow, publicId: string, patch: PropertyPatchBody) {
  const property = await withTransaction(deps.db, async (tx) => {
    const current = await repo.findPropertyForUpdate(tx, publicId);
    if (!current) throw new AppError('not_found', 'No such property');
    if (current.hostId !== user.id) throw new AppError('forbidden', 'Only the property’s host can change it');
    const row = await repo.updateProperty(tx, current.id, patch);
    await writePropertyChanged(tx, row.publicId, 'updated', user.publicId);
    return row;
  });
  await deps.afterPropertyCommit?.(property.publicId);
  return toPropertyResponse(property, user.publicId);
}

export async function getProperty(deps: PropertyDeps, publicId: string) {
  const p = await repo.findProperty(deps.db, publicId);
  if (!p) throw new AppError('not_found', 'No such property');
  return toPropertyResponse(p, p.hostPublicId);
}

export async function getAvailability(deps: PropertyDeps, publicId: string, from: string, to: string) {
  const p = await repo.findProperty(deps.db, publicId);
  if (!p) throw new AppError('not_found', 'No such property');
  const booked = await repo.bookedRanges(deps.db, p.id, from, to);
  return { propertyId: p.publicId, from, to, booked };
}
