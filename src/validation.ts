import { z } from 'zod';

/*
 * Text fields that a person types: names, titles, cities, search words.
 *
 * A single-line field never needs a control character, and each one is a way to forge what a
 * reader sees: a newline in a name forges lines in a log or an email header, a NUL cannot even be
 * stored in PostgreSQL text (the database would refuse it as a data error, after validation said
 * yes). So they are refused here, with a 400 that names the field, before anything else sees them.
 * C0 (U+0000–U+001F), DEL and C1 (U+007F–U+009F), and the Unicode line and paragraph separators
 * (U+2028, U+2029), which JavaScript and many log viewers treat as newlines.
 *
 * Multi-line fields (a description) keep tab, line feed and carriage return, and refuse the rest.
 *
 * The check runs BEFORE trimming, so "Eve\n" is refused rather than silently becoming "Eve".
 */
/* eslint-disable no-control-regex -- matching control characters is what these two patterns are for */
const SINGLE_LINE = /^[^\u0000-\u001f\u007f-\u009f\u2028\u2029]*$/;
const MULTI_LINE = /^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]*$/;
/* eslint-enable no-control-regex */

/** The one refinement every single-line text field goes through. */
export const noControlCharacters = (s: z.ZodString) => s.regex(SINGLE_LINE, 'must not contain control characters');

/** A single-line text field: control characters refused, then trimmed and bounded. */
export const singleLineText = (min: number, max: number) => noControlCharacters(z.string()).trim().min(min).max(max);

/** A multi-line text field: tab, CR and LF allowed, other control characters refused. */
export const multiLineText = (max: number) =>
  z.string().regex(MULTI_LINE, 'must not contain control characters other than tab and line breaks').trim().max(max);

/*
 * Characters that change how the text around them is shown without being seen themselves: the
 * bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE makes "Flat\u202Egnp.exe" read as
 * "Flatexe.png"; embeddings, isolates, the LRM/RLM/ALM marks) and the invisible format characters
 * (zero-width space U+200B, word joiner U+2060, U+FEFF, soft hyphen, tags, fillers…): Unicode's
 * Default_Ignorable_Code_Point, which holds all of them. A name or a property title is shown to
 * other people, in email subjects among other places, where any of these makes one name look like
 * another or reorders the words around it.
 *
 * Kept where text needs them: the zero-width joiner and non-joiner (U+200D, U+200C) between two
 * non-ASCII characters (emoji sequences, Persian and Indic scripts), and variation selectors after
 * a non-ASCII character (❤️ is U+2764 U+FE0F). Next to ASCII they only hide.
 */
const INVISIBLE = /\p{Default_Ignorable_Code_Point}/gu;
const JOINERS = new Set([0x200c, 0x200d]);
const isVariationSelector = (cp: number) => (cp >= 0xfe00 && cp <= 0xfe0f) || (cp >= 0xe0100 && cp <= 0xe01ef);

function allowedInvisible(s: string, index: number, char: string): boolean {
  const cp = char.codePointAt(0)!;
  // UTF-16 units: the unit before may be the low half of a pair, which is above ASCII as its character is.
  const previousNonAscii = index > 0 && s.charCodeAt(index - 1) > 0x7f;
  const nextNonAscii = index + char.length < s.length && s.charCodeAt(index + char.length) > 0x7f;
  if (JOINERS.has(cp)) return previousNonAscii && nextNonAscii;
  if (isVariationSelector(cp)) return previousNonAscii;
  return false;
}

/** The first invisible or direction-changing character of `s` that is not kept, as "U+202E", or undefined. */
export function firstInvisibleCharacter(s: string): string | undefined {
  for (const m of s.matchAll(INVISIBLE)) {
    if (!allowedInvisible(s, m.index, m[0])) return `U+${m[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  }
  return undefined;
}

/** `s` without the characters firstInvisibleCharacter refuses: for text stored before they were refused. */
export function withoutInvisibleCharacters(s: string): string {
  return s.replace(INVISIBLE, (char, index: number) => (allowedInvisible(s, index, char) ? char : ''));
}

/**
 * A single-line text other people see as a name or a title: control characters refused, invisible
 * and direction-changing characters refused (a 400 naming the field and the character), then
 * trimmed and bounded.
 */
export const displayText = (min: number, max: number) =>
  noControlCharacters(z.string())
    .superRefine((value, ctx) => {
      const found = firstInvisibleCharacter(value);
      if (found) ctx.addIssue({ code: 'custom', message: `must not contain invisible or text-direction characters (${found})` });
    })
    .trim()
    .min(min)
    .max(max);
