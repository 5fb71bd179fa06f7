import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Asks `probe` every `everyMs` until it answers (anything but undefined) or `deadline` (ms epoch)
 * passes: its answer, or undefined. A probe that throws counts as no answer yet: what the run
 * waits for is often behind a process or a PostgreSQL the faults restart.
 */
export async function poll<T>(probe: () => Promise<T | undefined>, deadline: number, everyMs: number): Promise<T | undefined> {
  while (Date.now() < deadline) {
    const answer = await probe().catch(() => undefined);
    if (answer !== undefined) return answer;
    await sleep(everyMs);
  }
  return undefined;
}
