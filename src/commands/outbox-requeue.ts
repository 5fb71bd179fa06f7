import os from 'node:os';
import { createDatabase } from '../db/client.ts';
import { requeueDead, type RequeueCriteria } from '../outbox/index.ts';
import { runMain, UsageError, type Command } from '../process/run-main.ts';

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

function criteriaOf(values: { id?: string[]; topic?: string; 'all-dead'?: boolean }): RequeueCriteria {
  const given = [values.id?.length ? '--id' : '', values.topic ? '--topic' : '', values['all-dead'] ? '--all-dead' : ''].filter(Boolean);
  if (given.length !== 1) throw new UsageError(given.length ? `${given.join(' and ')} cannot be combined` : 'say which messages');
  if (values.id) {
    const bad = values.id.filter((id) => !UUID.test(id));
    if (bad.length) throw new UsageError(`--id takes a message's public id (a uuid); not: ${bad.join(', ')}`);
    return { ids: values.id };
  }
  if (values.topic) return { topic: values.topic };
  return { allDead: true };
}

export const requeueCommand: Command = {
  name: 'outbox:requeue',
  usage: `${USAGE}

  --id ID      a DEAD message by its public id (repeatable)
  --topic T    every DEAD message of a topic
  --all-dead   every DEAD message`,
  options: { id: { type: 'string', multiple: true }, topic: { type: 'string' }, 'all-dead': { type: 'boolean' } },
  async run({ flags, config, logger, out }) {
    const criteria = criteriaOf(flags as { id?: string[]; topic?: string; 'all-dead'?: boolean });
    const database = createDatabase(config.DATABASE_URL, {
      max: 1,
      applicationName: 'stayhub-outbox-requeue',
      pooler: config.DATABASE_POOLER,
    });
    try {
      const label = `cli:${os.userInfo().username}`;
      const result = await requeueDead(database.db, criteria, { label });
      logger.info({ criteria, affected: result.affected, messageIds: result.messageIds, actor: label }, 'requeued dead messages');
      out(
        result.affected
          ? `outbox:requeue: ${result.affected} DEAD message(s) back to PENDING`
          : 'outbox:requeue: none: no DEAD message matched, nothing changed',
      );
      for (const id of result.messageIds) out(`  ${id}`);
      return 0;
    } finally {
      await database.close();
    }
  },
};

runMain(requeueCommand, import.meta.url);
