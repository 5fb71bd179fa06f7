import { parseEnv } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parseEnvText, unknownKeyWarning } from '../../src/env-file.ts';

/*
 * `.env` lines util.parseEnv reads otherwise than a person means them, each read as meant; and
 * every ordinary line read exactly as util.parseEnv reads it.
 */

describe('parseEnvText', () => {
  it('keeps a # inside an unquoted value (a password in a URL); a # after a space is a comment', () => {
    const text = 'DATABASE_URL=postgres://u:pa#ss@db.example:5432/stayhub\nPORT=4000 # the API\n';
    expect(parseEnv(text).DATABASE_URL).toBe('postgres://u:pa'); // what util.parseEnv does
    expect(parseEnvText(text)).toEqual({
      values: { DATABASE_URL: 'postgres://u:pa#ss@db.example:5432/stayhub', PORT: '4000' },
      reinterpreted: ['DATABASE_URL'],
    });
  });

  it('keeps what follows a closing quote: MAIL_FROM="Stay Hub" <a@b.c> keeps its address', () => {
    const text = 'MAIL_FROM="Stay Hub" <a@b.c>\nOTHER=\'x\' y # comment\nQUOTED="it"s"\n';
    expect(parseEnv(text).MAIL_FROM).toBe('Stay Hub');
    expect(parseEnvText(text)).toEqual({
      values: { MAIL_FROM: '"Stay Hub" <a@b.c>', OTHER: "'x' y", QUOTED: 'it"s' },
      reinterpreted: ['MAIL_FROM', 'OTHER', 'QUOTED'],
    });
  });

  it('drops a UTF-8 byte order mark instead of making it part of the first key', () => {
    const text = '\uFEFFDATABASE_URL=postgres://db/stayhub\nPORT=1\n';
    expect(parseEnv(text)).toMatchObject({ '\uFEFFDATABASE_URL': 'postgres://db/stayhub' });
    expect(parseEnv(text).DATABASE_URL).toBeUndefined();
    expect(parseEnvText(text)).toEqual({ values: { DATABASE_URL: 'postgres://db/stayhub', PORT: '1' }, reinterpreted: [] });
  });

  it('reads everything else exactly as util.parseEnv does', () => {
    const text = [
      '# a comment',
      'export A=1',
      'B="two words" # a comment after quotes',
      "C='single'",
      'D="line\\nbreak"',
      'E="first',
      'second # not a comment',
      'F=inside"',
      'G=  spaced  ',
      'H=',
      'I=#only a comment',
      'A=again',
      '',
    ].join('\n');
    expect(parseEnvText(text)).toEqual({ values: { ...parseEnv(text) }, reinterpreted: [] });
  });

  it('lets a later line for a key win, whichever of the two was corrected', () => {
    expect(parseEnvText('K=a#b\nK=plain\n').values.K).toBe('plain');
    expect(parseEnvText('K=plain\nK=a#b\n').values.K).toBe('a#b');
  });
});

describe('unknownKeyWarning', () => {
  const known = new Set(['PORT', 'HOST', 'WORKER_CONCURRENCY', 'WEBHOOK_CONCURRENCY', 'LOG_LEVEL']);

  it('says nothing of a known key', () => {
    expect(unknownKeyWarning('PORT', known)).toBeUndefined();
  });

  it('names the closest known key within two edits, whatever the case', () => {
    expect(unknownKeyWarning('PROT', known)).toMatch(/did you mean PORT\?/);
    expect(unknownKeyWarning('port', known)).toMatch(/did you mean PORT\?/);
    expect(unknownKeyWarning('WORKER_CONCURENCY', known)).toMatch(/did you mean WORKER_CONCURRENCY\?/);
    expect(unknownKeyWarning('LOGLEVEL', known)).toMatch(/did you mean LOG_LEVEL\?/);
  });

  it('guesses nothing for a key unlike any setting', () => {
    expect(unknownKeyWarning('FAVOURITE_COLOUR', known)).toBe(
      'FAVOURITE_COLOUR is not a setting StayHub reads (.env.example lists them): ignored',
    );
  });
});
