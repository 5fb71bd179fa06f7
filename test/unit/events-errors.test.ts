import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { JetStreamApiCodes } from '@nats-io/jetstream';
import { errors as natsErrors } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { PublishCircuit } from '../../src/events/circuit.ts';
import { createEventsMonitor } from '../../src/events/monitor.ts';

/*
 * The events path says "NATS is away" with one error class: the relay's circuit and the admin
 * API's monitor throw the same one, so an `instanceof` written against either catches both. And
 * a JetStream API error code the pinned client names is compared by that name, never as a number
 * copied beside each check.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function tsFiles(dir: string): string[] {
  return readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => path.join(dir, f));
}

describe('the events path names its failures once', () => {
  it("the circuit's and the monitor's EventsUnavailableError are one class", async () => {
    const circuit = new PublishCircuit('127.0.0.1:4222', { stallMs: 500 });
    circuit.failed(circuit.enter(), 'TIMEOUT');
    let fromCircuit: unknown;
    try {
      circuit.enter();
    } catch (err) {
      fromCircuit = err;
    }
    circuit.stop();

    const monitor = createEventsMonitor({
      url: 'nats://127.0.0.1:4222',
      stream: 'EVENTS',
      timeoutMs: 1_000,
      connect: () => Promise.reject(new natsErrors.ConnectionError('connection refused')),
    });
    const fromMonitor: unknown = await monitor.read().catch((err: unknown) => err);
    await monitor.close();

    expect(fromCircuit).toBeInstanceOf(Error);
    expect((fromCircuit as Error).name).toBe('EventsUnavailableError');
    expect((fromMonitor as Error).name).toBe('EventsUnavailableError');
    expect(fromMonitor).toBeInstanceOf((fromCircuit as Error).constructor);
  });

  it('src/ and scripts/ declare EventsUnavailableError once', () => {
    const declared = [...tsFiles('src'), ...tsFiles('scripts')].filter((f) =>
      /\bclass EventsUnavailableError\b/.test(readFileSync(path.join(root, f), 'utf8')),
    );
    expect(declared).toEqual(['src/events/errors.ts']);
  });

  it('no JetStream API code the client names is written as a number in src/ or scripts/', () => {
    const named = new Map(Object.entries(JetStreamApiCodes).map(([name, code]) => [String(code), name]));
    const found: string[] = [];
    for (const f of [...tsFiles('src'), ...tsFiles('scripts')]) {
      readFileSync(path.join(root, f), 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const m of line.matchAll(/\b\d{5}\b/g)) {
            const name = named.get(m[0]);
            if (name) found.push(`${f}:${i + 1}: ${m[0]} is JetStreamApiCodes.${name}`);
          }
        });
    }
    expect(found).toEqual([]);
  });
});
