export { detachDay, layOutPastDays, tableState } from '../../src/outbox/testing.ts';

/** The name of the outbox's partition of the UTC day `days` days from today (0: today). */
export function dayName(days: number): string {
  const d = new Date(Math.floor(Date.now() / 86_400_000 + days) * 86_400_000);
  return `outbox_${d.toISOString().slice(0, 10).replaceAll('-', '')}`;
}
