import { describe, expect, it } from 'vitest';
import { book, listProperty, signUp, useTestApp } from '../../helpers/app.ts';

const t = useTestApp();

describe('smoke', () => {
  it('books a stay and writes its outbox row', async () => {
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host);
    const res = await book(t.app, guest, { propertyId: property.id, inDays: 10, nights: 3, guests: 2 });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().price).toEqual({
      currency: 'EUR',
      nights: 3,
      nightlyPrice: 10000,
      subtotal: 30000,
      cleaningFee: 2500,
      serviceFee: 3900,
      total: 36400,
    });
    const { rows } = await t.db.pool.query(`select topic, key, payload from outbox order by id`);
    expect(rows.map((r) => r.topic)).toEqual(['property.changed', 'booking.created']);
  });
});
