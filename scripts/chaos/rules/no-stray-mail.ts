import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';

/** Mail the SMTP server accepted that nobody was owed, by what is wrong with it. */
export function strayMail(c: CaseFile): { wrongRecipient: string[]; unexpected: string[]; bounceDelivered: string[] } {
  const bounceDelivered: string[] = [];
  for (const [k, e] of c.expected.byKey) {
    if (e.bounces && c.accepted.copies.has(k)) bounceDelivered.push(`${e.what} was accepted although the address answers 550`);
  }
  const unexpected: string[] = [];
  const wrongRecipient: string[] = [];
  for (const k of c.accepted.copies.keys()) {
    if (c.expected.byKey.has(k)) continue;
    const [messageId, recipient] = [k.slice(0, k.lastIndexOf(' ')), k.slice(k.lastIndexOf(' ') + 1)];
    const meant = c.expected.byMessageId.get(messageId);
    if (meant) wrongRecipient.push(`${messageId} delivered to ${recipient}; it was meant for ${meant.map((e) => e.recipient).join(', ')}`);
    else unexpected.push(`unexpected Message-ID ${messageId} (to ${recipient})`);
  }
  return { wrongRecipient, unexpected, bounceDelivered };
}

/** Rule: no email to anyone else, none about anything that did not happen, none to a 550 address. */
export function noStrayMail(c: CaseFile): CheckResult {
  const s = strayMail(c);
  return checkResult(
    'no email to anyone else, and none about anything that did not happen (every accepted Message-ID and recipient match a booking)',
    [...s.wrongRecipient, ...s.unexpected, ...s.bounceDelivered],
  );
}
