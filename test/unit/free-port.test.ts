import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../src/net/free-port.ts';

/*
 * The ports the tests, the bench and the chaos run start their servers on. A port from the
 * kernel's ephemeral range can be taken, between being handed out and being bound, by any
 * outgoing connection's local end: one of a NATS node's route ports once was, and the chaos run
 * failed to start ("address already in use").
 */

const RANGE_FILE = '/proc/sys/net/ipv4/ip_local_port_range';

describe('freePort', () => {
  it.skipIf(!existsSync(RANGE_FILE))(
    'hands out ports below the ephemeral range, never the same one twice, each one free to listen on',
    async () => {
      const ephemeralFrom = Number(readFileSync(RANGE_FILE, 'utf8').trim().split(/\s+/)[0]);
      const ports: number[] = [];
      for (let i = 0; i < 50; i++) ports.push(await freePort());
      for (const p of ports) expect(p).toBeLessThan(ephemeralFrom);
      expect(new Set(ports).size).toBe(ports.length);
      const srv = net.createServer();
      await new Promise<void>((resolve, reject) => srv.once('error', reject).listen(ports[0], '127.0.0.1', resolve));
      await new Promise((r) => srv.close(r));
    },
  );
});
