import { readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startNodeProcess } from '../../lib/processes.ts';
import { Supervised } from '../processes.ts';
import type { ChaosNats } from './nats-cluster.ts';

/** The supervised consumer's log, in the run's directory. */
const CONSUMER_LOG = 'earnings-consumer.log';

/**
 * The earnings consumer (`npm run consume:earnings`), supervised like the run's other processes
 * (fault "consumer-kill"), and its last run to the end of the stream after the drain.
 */
export class EarningsConsumer {
  /** The supervised process: its unplanned exits count as crashes in the verdict. */
  readonly process: Supervised;
  /** The pid of the consumer process that last said it is running (pulling from its group). */
  private runningPid: number | undefined;
  private supervising = false;
  private stopped = false;
  kills = 0;

  constructor(
    private readonly entry: string,
    private readonly env: NodeJS.ProcessEnv,
    private readonly dir: string,
  ) {
    this.process = new Supervised({
      name: 'earnings-consumer',
      entry,
      env,
      logFile: path.join(dir, CONSUMER_LOG),
      onLine: (line) => {
        if (line.includes('"msg":"earnings consumer running"')) this.runningPid = this.process.pid;
      },
    });
  }

  start(): void {
    this.supervising = true;
    this.process.start();
  }

  /**
   * SIGKILL, down `downMs`, start again. Whatever it was applying rolls back and comes back
   * after the ack wait. Waits (up to `readyWaitMs`) for the consumer to be pulling from its
   * group, so the kill lands mid-stream rather than during its start-up. Resolves with the exit
   * seen (null: no consumer was running) and whether it was pulling.
   */
  async kill(downMs = 500, readyWaitMs = 3_000) {
    const c = this.process;
    const deadline = Date.now() + readyWaitMs;
    while (!(c.pid !== undefined && this.runningPid === c.pid) && Date.now() < deadline) await sleep(20);
    const consuming = c.running && this.runningPid === c.pid;
    const seen = await c.kill('SIGKILL');
    if (seen) this.kills++;
    await sleep(downMs);
    if (this.supervising) c.start();
    return { seen, consuming };
  }

  /** The last `lines` lines of the supervised consumer's log (every start of it), or why there are none. */
  logTail(lines: number): string {
    try {
      return readFileSync(path.join(this.dir, CONSUMER_LOG), 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch (err) {
      return `no consumer log: ${(err as Error).message}`;
    }
  }

  async stop(): Promise<void> {
    this.supervising = false;
    if (this.stopped) return;
    this.stopped = true;
    await this.process.stop(10_000);
  }

  /**
   * Stops the supervised consumer (SIGTERM), then runs one to the end of the stream
   * (--until-empty, bounded by `timeoutMs`). Throws if that one fails or does not finish.
   */
  async finish(nats: ChaosNats, log: (l: string) => void, timeoutMs = 120_000): Promise<void> {
    await this.stop();
    if (!nats.running) await nats.start();
    const output: string[] = [];
    const last = startNodeProcess({
      entry: this.entry,
      args: ['--until-empty'],
      env: this.env,
      logFile: path.join(this.dir, 'earnings-consumer-until-empty.log'),
      onLine: (line) => output.push(line),
    });
    const timer = setTimeout(() => last.child.kill('SIGKILL'), timeoutMs);
    const { code, signal } = await last.exited;
    clearTimeout(timer);
    if (code !== 0) {
      const why = signal === 'SIGKILL' ? `not done within ${timeoutMs / 1000} s` : `exited ${code ?? signal}`;
      throw new Error(`consume:earnings --until-empty ${why}: ${output.slice(-5).join(' / ')}`);
    }
    log('earnings consumer caught up with the stream');
  }
}
