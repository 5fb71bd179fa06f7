/** A stay's price, integers in minor units, as stored on the booking and shown to the guest. */
export interface PriceBreakdown {
  currency: string;
  nights: number;
  nightlyPrice: number;
  subtotal: number;
  cleaningFee: number;
  serviceFee: number;
  total: number;
}

const DAY_MS = 86_400_000;

/** Nights between two 'YYYY-MM-DD' dates (UTC calendar days, so no DST surprises). */
export function nightsBetween(checkIn: string, checkOut: string): number {
  return Math.round((Date.parse(`${checkOut}T00:00:00Z`) - Date.parse(`${checkIn}T00:00:00Z`)) / DAY_MS);
}

/**
 * serviceFee = round((subtotal + cleaningFee) × percent / 100), half up. Computed on integers
 * (the numerator is exact) so no float error can move a cent.
 */
export function priceStay(
  input: { checkIn: string; checkOut: string; nightlyPrice: number; cleaningFee: number; currency: string },
  serviceFeePercent: number,
): PriceBreakdown {
  const nights = nightsBetween(input.checkIn, input.checkOut);
  const subtotal = nights * input.nightlyPrice;
  const base = subtotal + input.cleaningFee;
  const serviceFee = Math.floor((base * serviceFeePercent + 50) / 100);
  return {
    currency: input.currency,
    nights,
    nightlyPrice: input.nightlyPrice,
    subtotal,
    cleaningFee: input.cleaningFee,
    serviceFee,
    total: base + serviceFee,
  };
}
