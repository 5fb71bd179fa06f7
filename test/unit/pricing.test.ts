import { describe, expect, it } from 'vitest';
import { nightsBetween, priceStay } from '../../src/bookings/pricing.ts';

describe('priceStay', () => {
  it('follows the documented formula', () => {
    expect(
      priceStay({ checkIn: '2027-03-01', checkOut: '2027-03-04', nightlyPrice: 10_000, cleaningFee: 2_500, currency: 'EUR' }, 12),
    ).toEqual({
      currency: 'EUR',
      nights: 3,
      nightlyPrice: 10_000,
      subtotal: 30_000,
      cleaningFee: 2_500,
      serviceFee: 3_900,
      total: 36_400,
    });
  });

  it('rounds the service fee half up', () => {
    // (1 night × 1,025 + 0) × 12% = 123.0 → 123; (1,029 × 12%) = 123.48 → 123; (1,030 × 12%) = 123.6 → 124
    const fee = (nightlyPrice: number) =>
      priceStay({ checkIn: '2027-01-01', checkOut: '2027-01-02', nightlyPrice, cleaningFee: 0, currency: 'EUR' }, 12).serviceFee;
    expect(fee(1_025)).toBe(123);
    expect(fee(1_029)).toBe(123);
    expect(fee(1_030)).toBe(124);
    // exactly half: 1,000 × 5% = 50 … use 10% of 5 = 0.5 → 1
    expect(
      priceStay({ checkIn: '2027-01-01', checkOut: '2027-01-02', nightlyPrice: 5, cleaningFee: 0, currency: 'EUR' }, 10).serviceFee,
    ).toBe(1);
  });

  it('counts nights across a DST change and a leap day', () => {
    expect(nightsBetween('2027-03-27', '2027-03-29')).toBe(2);
    expect(nightsBetween('2028-02-28', '2028-03-01')).toBe(2);
  });
});
