import type { CaseFile } from '../case-file.ts';
import { checkResult, EVENT_CHECKS, WEBHOOK_CHECKS, type CheckResult } from '../checks.ts';

/** The checks made, each required name that is not among them first, as broken. */
function required(names: string[], made: CheckResult[]): CheckResult[] {
  const have = new Set(made.map((c) => c.name));
  return [...names.filter((n) => !have.has(n)).map((n) => checkResult(n, ['this check was not made'])), ...made];
}

/**
 * Rule: the events path, when it ran: each of its checks (EVENT_CHECKS: events/check.ts's, and
 * the email pace judged here from the clients' and the SMTP server's records) is in the final
 * list; one that was not made is broken, not skipped.
 */
export function eventsPath(c: CaseFile): CheckResult[] {
  if (!c.input.events || !c.pace) return [];
  return required(Object.values(EVENT_CHECKS), [...c.input.events.checks, c.pace.check]);
}

/** Rule: the webhooks' checks (WEBHOOK_CHECKS, made by webhooks.ts) are each in the final list. */
export function webhooks(c: CaseFile): CheckResult[] {
  return required(Object.values(WEBHOOK_CHECKS), c.input.webhooks.checks);
}
