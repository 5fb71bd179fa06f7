import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';

/**
 * How long after a NATS outage's end a consumer's "cannot reach NATS" exit is still put down to it:
 * a start that began while the server was down connects (3 s timeout) after it came back.
 */
const NATS_REFUSAL_SLACK_MS = 5_000;

/**
 * Rule: no process crashed on its own, PostgreSQL's backends included (read from its log:
 * ../postgres-crashes.ts). The allowed exits: a worker restarted while Postgres is
 * down refuses to start (exit 1, "cannot reach the database"); the earnings consumer started
 * while nats-server is down (a NATS outage with evidence, or just after one) refuses to start
 * (exit 1, "cannot reach NATS"). Their manager starts them again.
 */
export function noCrash(c: CaseFile): CheckResult {
  const v: string[] = [];
  const natsDown = c.input.faults.filter((f) => f.kind === 'nats-outage' && f.evidence);
  for (const e of c.input.unplannedExits) {
    const refusedToStart = e.code === 1 && e.lastLines.some((l) => l.includes('cannot reach the database'));
    const refusedWhileNatsDown =
      e.code === 1 &&
      e.lastLines.some((l) => l.includes('cannot reach NATS')) &&
      e.at !== undefined &&
      natsDown.some((f) => e.at! >= f.startedAt && e.at! <= f.endedAt + NATS_REFUSAL_SLACK_MS);
    if (!refusedToStart && !refusedWhileNatsDown)
      v.push(`${e.process} exited on its own (code ${e.code ?? e.signal}): ${e.lastLines.join(' / ').slice(0, 600)}`);
  }
  return checkResult(
    'no process crashed (a worker refusing to start while Postgres is down, or the consumer while NATS is, is allowed)',
    v,
  );
}
