import os from 'node:os';
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.ts';
import { createDatabase } from '../src/db/client.ts';
import { createLogger } from '../src/logger.ts';
import { requeueDead, type RequeueCriteria } from '../src/outbox/requeue.ts';

/*
 * `npm run outbox:requeue -- --id <publicId> [--id …] | --topic <t> | --all-dead`
 *
 * Puts DEAD messages back to PENDING with attempts reset (a full set of retries), in one
 * transaction with an outbox_audit row naming who did it (see src/outbox/requeue.ts). Handlers
 * that already succeeded for a message are not run again. Only DEAD messages are touched.
 * Fix the cause first: a message that died of a bad payload dies again.
 */

const USAGE = 'usage: npm run outbox:requeue -- --id <publicId> [--id <publicId> …] | --topic <topic> | --all-dead';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function parse(argv: string[]): RequeueCriteria {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: { id: { type: 'string', multiple: true }, topic: { type: 'string' }, 'all-dead': { type: 'boolean' } },
  });
  const given = [values.id?.length ? '--id' : '', values.topic ? '--topic' : '', values['all-dead'] ? '--all-dead' : ''].filter(Boolean);
  if (given.length !== 1) throw new Error(given.length ? `${given.join(' and ')} cannot be combined` : 'say which messages');
  if (values.id) {
    const bad = values.id.filter((id) => !UUID.test(id));
    if (bad.length) throw new Error(`--id takes a message's public id (a uuid); not: ${bad.join(', ')}`);
    return { ids: values.id };
  }
  if (values.topic) return { topic: values.topic };
  return { allDead: true };
}

async function main(): Promise<number> {
  let criteria: RequeueCriteria;
  try {
    criteria = parse(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`outbox:requeue: ${(e as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'outbox-requeue', { format: config.LOG_FORMAT });
  const database = createDatabase(config.DATABASE_URL, { max: 1, applicationName: 'stayhub-outbox-requeue' });
  try {
    const label = `cli:${os.userInfo().username}`;
    const result = await requeueDead(database.db, criteria, { label });
    logger.info({ criteria, affected: result.affected, messageIds: result.messageIds, actor: label }, 'requeued dead messages');
    process.stdout.write(`outbox:requeue: ${result.affected} DEAD message(s) back to PENDING\n`);
    for (const id of result.messageIds) process.stdout.write(`  ${id}\n`);
    return 0;
  } catch (e) {
    process.stderr.write(`outbox:requeue: ${(e as Error).message}\n`);
    return 1;
  } finally {
    await database.close();
  }
}

main().then((code) => (process.exitCode = code));
