import { describe, expect, it } from 'vitest';
import { LogCapture, uniqueEmail, useTestApp } from '../../helpers/app.ts';
import { createLogger } from '../../../src/logger.ts';

/*
 * A database error must never put the query's bound parameters into the log, whatever they
 * contain. drizzle writes them into its error's message and stack ("\nparams: a,b,c"); a value
 * with a newline in it must not end the redaction early and leak the rest, the password's scrypt
 * hash included.
 */

const t = useTestApp();

const parsed = (capture: LogCapture) => capture.lines.map((l) => JSON.parse(l) as Record<string, unknown>);

describe('database errors in the log', () => {
  it('POST /auth/register with a name of "Eve\\n\\u0000": no hash, no parameters in the log', async () => {
    const email = uniqueEmail('eve');
    const res = await t.app.inject({
      method: 'POST',
      url: '/auth/register',
      payload: { email, password: 'correct horse battery', name: 'Eve\n\u0000', role: 'guest' },
    });
    expect(res.statusCode).toBe(400);
    const text = t.logs.text;
    expect(text).not.toContain('scrypt');
    expect(text).not.toContain(email);
    expect(text).not.toMatch(/\$[0-9a-f]{16,}/i); // no hash-looking run of hex either
    // When the request reached the database, its error was logged: without the parameters.
    for (const line of parsed(t.logs)) {
      const err = line.err as Record<string, unknown> | undefined;
      if (!err) continue;
      expect(err.params).toBeUndefined();
      expect(JSON.stringify(err)).not.toContain('correct horse');
      expect(String(err.message)).not.toMatch(/params: (?!\[redacted\])/);
    }
  });
});

describe('the error serializer', () => {
  /** What drizzle throws: its message and stack carry the parameters, the pg error is the cause. */
  function drizzleLikeError(params: unknown[]) {
    const pgError = Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
      code: '22021',
      detail: 'Key (email)=(victim@example.test) already exists.',
    });
    class DrizzleQueryError extends Error {
      constructor(
        public query: string,
        public params: unknown[],
        cause: Error,
      ) {
        super(`Failed query: ${query}\nparams: ${params.join(',')}`);
        this.cause = cause;
      }
    }
    return new DrizzleQueryError('insert into "users" ("email", "name", "password_hash") values ($1, $2, $3)', params, pgError);
  }

  const secrets = ['victim@example.test', 'scrypt$16384$8$1$c2FsdA$aGFzaGhhc2hoYXNo', 'line-after-the-newline'];

  for (const [label, params] of [
    ['a name with a newline and a NUL', ['victim@example.test', 'Eve\n\u0000', secrets[1], 'guest']],
    ['a value that imitates a stack frame', ['victim@example.test', 'x\n    at fake (/x.js:1:1)\ncaused by: y', secrets[1]]],
    ['several newlines', ['victim@example.test', 'a\n\nb\r\n', secrets[1], 'line\nline-after-the-newline']],
  ] as const) {
    it(`drops every parameter: ${label}`, () => {
      const capture = new LogCapture();
      const log = createLogger('info', 'test', capture);
      const err = drizzleLikeError([...params]);
      log.error({ err }, 'boom');
      // wrapped once more under another key: nested errors are serialized too
      log.error({ err: Object.assign(new Error('outer'), { inner: err }) }, 'wrapped');
      const text = capture.text;
      for (const s of secrets) expect(text).not.toContain(s);
      const [first, second] = parsed(capture);
      const e = first!.err as Record<string, string>;
      expect(e.message).toContain('Failed query: insert into "users"');
      expect(e.message).toContain('params: [redacted]');
      expect(e.message).toContain('invalid byte sequence'); // the cause is still there
      expect(e.stack).toContain('caused by:');
      expect(e.params).toBeUndefined();
      expect((e as Record<string, unknown>).code ?? (e as Record<string, unknown>).query).toBeDefined();
      expect(JSON.stringify(second)).toContain('params: [redacted]');
    });
  }
});
