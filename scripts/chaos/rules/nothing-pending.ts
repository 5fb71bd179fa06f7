import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';
import type { OutboxRow } from '../evidence.ts';

/** The messages still PENDING at the end: of topics the worker handles, and of topics it does not. */
export function pendingAtEnd(c: CaseFile): { handled: OutboxRow[]; unhandled: OutboxRow[] } {
  const handled = new Set(c.input.handledTopics);
  const pending = c.input.outbox.filter((m) => m.status === 'PENDING');
  return { handled: pending.filter((m) => handled.has(m.topic)), unhandled: pending.filter((m) => !handled.has(m.topic)) };
}

/** Rule: nothing PENDING at the end, for the topics the worker handles. */
export function nothingPending(c: CaseFile): CheckResult {
  return checkResult(
    'the outbox ends with nothing PENDING',
    pendingAtEnd(c).handled.map((m) => `${m.topic} ${m.publicId} still PENDING after ${m.attempts} attempts: ${m.lastError ?? ''}`),
  );
}

/** Rule: the drain finished within its bound. */
export function drained(c: CaseFile): CheckResult {
  return checkResult('the workers drain within the bound', c.input.drained ? [] : ['not drained']);
}
