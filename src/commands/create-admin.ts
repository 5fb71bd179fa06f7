import { z } from 'zod';
import type { Config } from '../config.ts';
import { runMain, UsageError, type Command } from '../process/run-main.ts';
import { createDatabase } from '../db/client.ts';
import { AppError } from '../errors.ts';
import { createUser } from '../users/auth.service.ts';
import { emailSchema, userName } from '../users/users.schemas.ts';

/*
 * `npm run create-admin -- --email ops@example.com --name "Olga Ops"`
 *
 * Creates a user with role `admin` (the role cannot be chosen at sign-up). The password is never
 * a flag — it would stay in the shell history and show in `ps` — but is typed at a prompt without
 * echo, or piped on stdin (`printf '%s\n' "$PW" | npm run create-admin -- …`, first line used).
 * Needs the database running (`npm start`, or DATABASE_URL).
 *
 * Exit codes: 0 created · 1 the email is taken or the database is unreachable · 2 bad input.
 */

const USAGE = 'usage: npm run create-admin -- --email <email> --name <name>   (password from the prompt or stdin)';
const MIN_PASSWORD = 10;

const input = z.object({
  email: emailSchema,
  // The sign-up's rule: a newline or an ESC in a name forges log lines and email text.
  name: userName,
  password: z.string().min(MIN_PASSWORD, `must be at least ${MIN_PASSWORD} characters`).max(200),
});

/** Reads a line from the terminal without echoing it. Ctrl-C cancels. */
function promptHidden(question: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.resume();
  stdin.setEncoding('utf8');
  return new Promise((resolve, reject) => {
    let value = '';
    const finish = (fn: () => void) => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
      fn();
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n') return finish(() => resolve(value));
        if (ch === '\u0003' || ch === '\u0004') return finish(() => reject(new UsageError('cancelled')));
        if (ch === '\u007f' || ch === '\b') value = value.slice(0, -1);
        else value += ch;
      }
    };
    stdin.on('data', onData);
  });
}

/** Piped input: the first line, without its line ending. */
async function readStdinLine(): Promise<string> {
  let data = '';
  for await (const chunk of process.stdin) data += chunk;
  return data.split(/\r?\n/)[0] ?? '';
}

async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) return readStdinLine();
  const first = await promptHidden('Password (at least 10 characters): ');
  const second = await promptHidden('Same password again: ');
  if (first !== second) throw new UsageError('the two passwords differ');
  return first;
}

export const createAdminCommand: Command = {
  name: 'create-admin',
  usage: `${USAGE}

  --email EMAIL   the admin's email (sign-in name)
  --name NAME     the admin's display name
The password is never a flag (shell history, ps): it is read from the prompt, or from stdin when piped.`,
  // --password is declared only to refuse it with a reason, instead of "unknown option".
  options: { email: { type: 'string' }, name: { type: 'string' }, password: { type: 'string' } },
  async run({ flags, config }) {
    if (flags.password !== undefined) {
      throw new UsageError('the password is not taken as a flag (shell history, ps); type it at the prompt or pipe it on stdin');
    }
    if (typeof flags.email !== 'string' || typeof flags.name !== 'string') throw new UsageError('--email and --name are required');
    return createAdmin(config, { email: flags.email, name: flags.name });
  },
};

async function createAdmin(config: Config, flags: { email: string; name: string }): Promise<number> {
  let values: z.infer<typeof input>;
  try {
    const parsed = input.safeParse({ ...flags, password: await readPassword() });
    if (!parsed.success) {
      process.stderr.write(`create-admin: ${parsed.error.issues.map((i) => `${i.path.join('.')} ${i.message}`).join('; ')}\n`);
      return 2;
    }
    values = parsed.data;
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`create-admin: ${e.message}\n`);
      return 2;
    }
    throw e;
  }

  const database = createDatabase(config.DATABASE_URL, { max: 1, applicationName: 'stayhub-create-admin', pooler: config.DATABASE_POOLER });
  try {
    const user = await createUser(database.db, { ...values, role: 'admin' });
    process.stdout.write(`created admin ${user.publicId} (${user.email}); sign in at /admin\n`);
    return 0;
  } catch (e) {
    if (e instanceof AppError && e.code === 'email_taken') {
      process.stderr.write('create-admin: an account with this email already exists\n');
      return 1;
    }
    // drizzle wraps the driver's error and its message quotes the query with its parameters (the
    // password hash among them): report only the underlying error's code.
    const cause = ((e as { cause?: unknown }).cause ?? e) as { code?: string };
    process.stderr.write(`create-admin: could not write to the database (${cause.code ?? 'unknown error'}); is it running?\n`);
    return 1;
  } finally {
    await database.close();
  }
}

runMain(createAdminCommand, import.meta.url);
