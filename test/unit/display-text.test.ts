import { describe, expect, it } from 'vitest';
import { guestCancellation, guestConfirmation, hostNewBooking } from '../../src/mail/templates.ts';
import { propertyBody, propertyPatchBody } from '../../src/properties/properties.schemas.ts';
import { registerBody, userName } from '../../src/users/users.schemas.ts';
import { firstInvisibleCharacter, withoutInvisibleCharacters } from '../../src/validation.ts';

/*
 * Names and property titles reach other people, in email subjects among other places: characters
 * that reorder or hide text (bidirectional controls, zero-width and other invisible characters)
 * are refused there, and stripped from what the emails show.
 */

const RLO = '\u202E';
const ZWSP = '\u200B';

describe('invisible and text-direction characters', () => {
  it.each([
    ['right-to-left override', `Ada${RLO}gnp.exe`, 'U+202E'],
    ['left-to-right isolate', 'Ada\u2066x', 'U+2066'],
    ['right-to-left mark', 'Ada\u200Fx', 'U+200F'],
    ['zero-width space', `Ad${ZWSP}a`, 'U+200B'],
    ['word joiner', 'Ad\u2060a', 'U+2060'],
    ['byte order mark', 'Ada\uFEFF', 'U+FEFF'],
    ['soft hyphen', 'Ad\u00ADa', 'U+00AD'],
    ['tag character', 'Ada\u{E0041}', 'U+E0041'],
    ['zero-width joiner between ASCII letters', 'ad\u200Dmin', 'U+200D'],
    ['variation selector after an ASCII letter', 'a\uFE0Fdmin', 'U+FE0F'],
  ])('refuses a %s', (_what, text, codePoint) => {
    expect(firstInvisibleCharacter(text)).toBe(codePoint);
    const parsed = userName.safeParse(text);
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.message).toBe(`must not contain invisible or text-direction characters (${codePoint})`);
  });

  it.each([
    ['a plain name', 'Zoë Ødegård-Łukasz'],
    ['an emoji family (zero-width joiners between emoji)', 'The 👨‍👩‍👧 family'],
    ['a red heart (a variation selector after the emoji)', 'I ❤️ Porto'],
    ['Persian with a zero-width non-joiner', 'می‌خواهم'],
    ['Arabic, right to left by itself', 'شقة على البحر'],
  ])('keeps %s', (_what, text) => {
    expect(firstInvisibleCharacter(text)).toBeUndefined();
    expect(userName.parse(text)).toBe(text);
    expect(withoutInvisibleCharacters(text)).toBe(text);
  });

  it('applies to sign-up names and property titles, on creation and on change', () => {
    const register = registerBody.safeParse({ email: 'a@b.test', password: 'long enough secret', name: `Eve${RLO}`, role: 'guest' });
    expect(register.error?.issues.map((i) => i.path.join('.'))).toEqual(['name']);
    const property = { title: `Loft${ZWSP} in Porto`, city: 'Porto', country: 'PT', nightlyPrice: 1000, maxGuests: 2 };
    expect(propertyBody.safeParse(property).error?.issues.map((i) => i.path.join('.'))).toEqual(['title']);
    expect(propertyPatchBody.safeParse({ title: `Loft${RLO}` }).error?.issues.map((i) => i.path.join('.'))).toEqual(['title']);
    expect(propertyBody.safeParse({ ...property, title: 'Loft in Porto' }).success).toBe(true);
  });

  it('strips them from what the booking emails show (rows saved before they were refused)', () => {
    const booking = {
      bookingId: '00000000-0000-4000-8000-000000000001',
      propertyId: '00000000-0000-4000-8000-000000000002',
      propertyTitle: `Sea view${RLO}gnp.exe`,
      guestEmail: 'g@example.test',
      guestName: `Gil${ZWSP}`,
      hostEmail: 'h@example.test',
      hostName: `Hana\u2066`,
      checkIn: '2030-01-10',
      checkOut: '2030-01-12',
      guests: 2,
      nights: 2,
      total: 25_000,
      currency: 'EUR',
      idempotencyKey: 'k',
    };
    for (const mail of [guestConfirmation(booking), hostNewBooking(booking), guestCancellation({ ...booking, cancelledBy: 'guest' })]) {
      for (const part of [mail.subject, mail.text, mail.html]) expect(firstInvisibleCharacter(part), part).toBeUndefined();
      expect(mail.subject).toContain('Sea viewgnp.exe');
    }
    expect(hostNewBooking(booking).text).toContain('Hello Hana,');
    expect(guestConfirmation(booking).text).toContain('Hello Gil,');
  });
});
