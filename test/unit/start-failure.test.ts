import { describe, expect, it } from 'vitest';
import { describeStartFailure } from '../../src/process/run-main.ts';

/*
 * The one line a command ends with when the database is the reason. A process manager (and the
 * chaos run) reads "cannot reach the database" as "start it again later", so every way of losing
 * the database must say it, including a connection cut while the command was starting.
 */
const config = { DATABASE_URL: 'postgres://u:secret@db.example:5432/stayhub' };
const pgError = (code: string, message: string) => Object.assign(new Error(message), { code });

describe('describeStartFailure', () => {
  it('says "cannot reach the database" for a refused connection and for one terminated under it', () => {
    for (const e of [
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      pgError('57P01', 'terminating connection due to administrator command'),
      pgError('08006', 'connection failure'),
      new Error('Connection terminated unexpectedly'),
      // A host with two addresses, both refused: node-postgres reports an AggregateError.
      new AggregateError([Object.assign(new Error('connect ECONNREFUSED ::1:5432'), { code: 'ECONNREFUSED' })], ''),
      Object.assign(new Error('getaddrinfo ENOTFOUND db.example'), { code: 'ENOTFOUND' }),
      pgError('28P01', 'password authentication failed for user "u"'),
      pgError('3D000', 'database "stayhub" does not exist'),
      // drizzle wraps the driver's error: the pg error is its cause.
      Object.assign(new Error('Failed query: select 1 from outbox limit 0'), {
        cause: pgError('57P01', 'terminating connection due to administrator command'),
      }),
    ]) {
      const line = describeStartFailure(e, config);
      expect(line, e.message).toMatch(/^cannot reach the database at db\.example:5432\/stayhub: /);
      expect(line).not.toContain('secret');
    }
  });

  it('says the database is not migrated, and passes any other error through as its first line', () => {
    expect(describeStartFailure(pgError('42P01', 'relation "outbox" does not exist'), config)).toBe(
      'the database at db.example:5432/stayhub is not migrated (relation "outbox" does not exist); run `npm run migrate` first',
    );
    expect(describeStartFailure(new Error('boom\n    at somewhere'), config)).toBe('boom');
  });
});
