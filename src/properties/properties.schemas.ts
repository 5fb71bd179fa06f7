import { z } from 'zod';
import { displayText, multiLineText, singleLineText } from '../validation.ts';

const money = z.number().int().min(0).max(10_000_000); // minor units; 100,000.00 a night at most

export const propertyBody = z.strictObject({
  // In every booking email's subject: no invisible or text-direction characters (src/validation.ts).
  title: displayText(3, 200),
  description: multiLineText(5000).default(''),
  city: singleLineText(1, 100),
  country: z
    .string()
    .regex(/^[A-Za-z]{2}$/, 'must be an ISO 3166-1 alpha-2 code')
    .transform((c) => c.toUpperCase()),
  currency: z
    .string()
    .regex(/^[A-Za-z]{3}$/, 'must be an ISO 4217 code')
    .transform((c) => c.toUpperCase())
    .default('EUR'),
  nightlyPrice: money.min(1),
  cleaningFee: money.default(0),
  maxGuests: z.number().int().min(1).max(100),
  active: z.boolean().default(true),
});
export type PropertyBody = z.infer<typeof propertyBody>;

/** PATCH: any subset of the fields, at least one; no defaults are filled in. */
export const propertyPatchBody = z
  .strictObject({
    title: propertyBody.shape.title,
    description: multiLineText(5000),
    city: propertyBody.shape.city,
    country: propertyBody.shape.country,
    currency: z
      .string()
      .regex(/^[A-Za-z]{3}$/, 'must be an ISO 4217 code')
      .transform((c) => c.toUpperCase()),
    nightlyPrice: money.min(1),
    cleaningFee: money,
    maxGuests: propertyBody.shape.maxGuests,
    active: z.boolean(),
  })
  .partial()
  .refine((b) => Object.keys(b).length > 0, { message: 'at least one field is required' });
export type PropertyPatchBody = z.infer<typeof propertyPatchBody>;

export const idParams = z.strictObject({ id: z.string().uuid() });

export const propertyResponse = z.object({
  id: z.string().uuid(),
  hostId: z.string().uuid(),
  title: z.string(),
  description: z.string(),
  city: z.string(),
  country: z.string(),
  currency: z.string(),
  nightlyPrice: z.number().int(),
  cleaningFee: z.number().int(),
  maxGuests: z.number().int(),
  active: z.boolean(),
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type PropertyResponse = z.infer<typeof propertyResponse>;

export const isoDate = z.iso.date();

export const availabilityQuery = z
  .strictObject({ from: isoDate, to: isoDate })
  .refine((q) => q.to > q.from, { message: 'must be after from', path: ['to'] })
  .refine((q) => (Date.parse(q.to) - Date.parse(q.from)) / 86_400_000 <= 366, {
    message: 'range must be at most 366 days',
    path: ['to'],
  });

export const availabilityResponse = z.object({
  propertyId: z.string().uuid(),
  from: z.string(),
  to: z.string(),
  booked: z.array(z.object({ checkIn: z.string(), checkOut: z.string() })),
});
