import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { purgeCommand } from '../../../src/commands/outbox-purge.ts';
import { requeueCommand } from '../../../src/commands/outbox-requeue.ts';
import { statsCommand } from '../../../src/commands/outbox-stats.ts';
import { reindexCommand } from '../../../src/commands/reindex.ts';
import type { Command } from '../../../src/process/run-main.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { runInProcess, runScript } from '../../helpers/npm-run.ts';
import { layOutPastDays } from '../../helpers/outbox-partitions.ts';
import { getMessages, insertMessages } from '../../helpers/outbox-rows.ts';

/*
 * The outbox's operator scripts: stats, requeue of dead letters, purge. The first requeue runs as
 * a real process (`node --import tsx scripts/…`, as npm runs it); the other runs go through the
 * same command in this process (runInProcess), which a node and tsx start would only make slower.
 */

const tdb = useTestDatabase('wscripts', { truncate: 'outbox, outbox_audit' });

const env = () => ({ ...process.env, DATABASE_URL: tdb.url, LOG_LEVEL: 'warn' });
const run = (command: Command, args: string[] = []) => runInProcess(command, args, env());

describe('outbox scripts', () => {
  // A script process (a node + tsx start) takes seconds on a busy two-core machine, so the hang
  // guard is wider than the default.
  it('outbox:requeue puts DEAD messages back (by id, by topic, all) with attempts reset, and audits it', { timeout: 120_000 }, async () => {
    const rows = await insertMessages(tdb.db, [{ topic: 'a.dead' }, { topic: 'a.dead' }, { topic: 'b.dead' }, { topic: 'c.done' }]);
    await tdb.db.execute(sql`
      update outbox set status = case when topic = 'c.done' then 'DONE' else 'DEAD' end,
                        attempts = 8, processed_at = now(), last_error = 'h: Error: x'`);

    let r = await runScript('src/commands/outbox-requeue.ts', ['--id', rows[0]!.public_id], { ...env(), LOG_LEVEL: 'info' });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('1 DEAD message(s) back to PENDING');
    expect(r.stdout).toContain(rows[0]!.public_id);
    r = await run(requeueCommand, ['--topic', 'b.dead']);
    expect(r.stdout).toContain('1 DEAD message(s) back to PENDING');
    let after = await getMessages(
      tdb.db,
      rows.map((m) => m.id),
    );
    expect(after.map((m) => [m.status, m.attempts])).toEqual([
      ['PENDING', 0],
      ['DEAD', 8],
      ['PENDING', 0],
      ['DONE', 8],
    ]);

    r = await run(requeueCommand, ['--all-dead']);
    expect(r.stdout).toContain('1 DEAD message(s) back to PENDING');
    after = await getMessages(
      tdb.db,
      rows.map((m) => m.id),
    );
    expect(after.map((m) => m.status)).toEqual(['PENDING', 'PENDING', 'PENDING', 'DONE']);
    const { rows: audit } = await tdb.db.execute<{ affected: number; actor: string }>(
      sql`select affected, actor from outbox_audit order by id`,
    );
    expect(audit.map((a) => a.affected)).toEqual([1, 1, 1]);
    expect(audit[0]!.actor).toMatch(/^cli:/);

    // Nothing left to requeue: said in words.
    r = await run(requeueCommand, ['--all-dead']);
    expect(r.stdout.trim()).toBe('outbox:requeue: none: no DEAD message matched, nothing changed');

    // The usage errors touch no row.
    const [noFlag, badId] = await Promise.all([run(requeueCommand, []), run(requeueCommand, ['--id', 'not-a-uuid'])]);
    expect(noFlag.code).toBe(2);
    expect(noFlag.stderr).toContain('usage: npm run outbox:requeue');
    expect(badId.code).toBe(2);
  });

  it('outbox:stats prints pending, leased, dead and oldest pending age per topic', async () => {
    await insertMessages(tdb.db, [{ topic: 'booking.created' }, { topic: 'booking.created' }, { topic: 'property.changed' }]);
    await tdb.db.execute(sql`update outbox set created_at = now() - interval '90 seconds' where topic = 'property.changed'`);
    await tdb.db.execute(sql`update outbox set claim_id = gen_random_uuid(), leased_until = now() + interval '1 minute'
                              where id = (select min(id) from outbox)`);
    const r = await run(statsCommand);
    expect(r.code).toBe(0);
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split(/\s{2,}/));
    expect(lines[0]).toEqual(['topic', 'pending', 'leased', 'dead', 'done 1h', 'oldest pending']);
    expect(lines).toContainEqual(['booking.created', '2', '1', '0', '0', expect.stringMatching(/^\d+s$/)]);
    expect(lines).toContainEqual(['property.changed', '1', '0', '0', '0', expect.stringMatching(/^(9\d|1\d\d)s$/)]);
    expect(lines.at(-1)!.slice(0, 4)).toEqual(['TOTAL', '3', '1', '0']);
  });

  it('outbox:stats says none when no message is pending, dead or done within the hour', async () => {
    const r = await run(statsCommand);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n').at(-1)).toBe('none: no message pending or dead, and none done in the last hour');
  });

  it('outbox:purge deletes old DONE messages only: whole days, and the rest of a day a DEAD letter keeps', async () => {
    await layOutPastDays(tdb.pool, 14);
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at, created_at)
      select 't', '{}'::jsonb, 'DONE', now() - interval '10 days', now() - interval '10 days' from generate_series(1, 1200)
      union all select 't', '{}', 'DONE', now() - interval '11 days', now() - interval '11 days' from generate_series(1, 5)
      union all select 't', '{}', 'DEAD', now() - interval '11 days', now() - interval '11 days'
      union all select 't', '{}', 'DONE', now(), now()`);
    await tdb.pool.query('analyze outbox'); // a dropped day's rows are counted from its statistics
    const r = await run(purgeCommand, ['--days', '7']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/deleted 1205 DONE message\(s\) older than 7 day\(s\) \(\d+ day partition\(s\) dropped whole\)/);
    const { rows } = await tdb.db.execute<{ status: string }>(sql`select status from outbox order by status`);
    expect(rows.map((r) => r.status)).toEqual(['DEAD', 'DONE']);
  });

  it('outbox:purge --days out of range is a usage error (exit 2), the longest range a purge', { timeout: 120_000 }, async () => {
    // As a process: the exit code is the process's own. It used to be 1, with "Invalid time value".
    const bad = await runScript('src/commands/outbox-purge.ts', ['--days', '99999999'], env());
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr.split('\n')[0]).toBe('outbox:purge: --days must be a whole number from 0 to 36500 (got "99999999")');
    expect(bad.stderr).toContain('usage: npm run outbox:purge');
    for (const days of ['-1', '1e3', '']) expect((await run(purgeCommand, ['--days', days])).code, days).toBe(2);
    await insertMessages(tdb.db, [{ topic: 't' }]);
    const r = await run(purgeCommand, ['--days', '36500']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('deleted 0 DONE message(s) older than 36500 day(s)');
  });

  it('reindex --batch-size takes only a whole number in its range', async () => {
    for (const size of ['1e3', '0', '10001', ' 5']) {
      const r = await run(reindexCommand, ['--batch-size', size]);
      expect(r.code, size).toBe(2);
      expect(r.stderr).toContain(`--batch-size must be a whole number from 1 to 10000 (got "${size}")`);
    }
  });
});
