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
