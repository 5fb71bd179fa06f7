import { describe, expect, it } from 'vitest';
import { hasTool, inCI } from '../helpers/tools.ts';

/*
 * The external tools some checks call. On a developer's machine a missing one only skips those
 * checks (they say how to install it, and the run's last lines list them); in CI (CI=1 or
 * CI=true; .ci/run sets it) it is a failure, so a CI image that lost a package cannot turn checks
 * into skips and still pass.
 */
const TOOLS = [
  { name: 'promtool', versionArgs: ['--version'], debian: 'prometheus', usedBy: 'test/integration/metrics/alerts.test.ts' },
  { name: 'pgbench', versionArgs: ['--version'], debian: 'postgresql-client', usedBy: 'test/integration/harness/bench-smoke.test.ts' },
  { name: 'nats-server', versionArgs: ['--version'], debian: 'nats-server', usedBy: 'the JetStream tests' },
  { name: 'pgbouncer', versionArgs: ['--version'], debian: 'pgbouncer', usedBy: 'test/integration/outbox/claim-pgbouncer.test.ts' },
  {
    name: 'docker-compose',
    versionArgs: ['version'],
    debian: '--no-install-recommends docker-compose',
    usedBy: 'test/integration/stream/nats-auth.test.ts',
  },
];

describe('tools the suite calls', () => {
  for (const tool of TOOLS) {
    it(`${tool.name}: present, or we are not in CI`, () => {
      const present = hasTool(tool.name, tool.versionArgs);
      expect(
        present || !inCI,
        `${tool.name} is missing with CI=${process.env.CI} (${tool.usedBy} would check less): apt-get install -y ${tool.debian}`,
      ).toBe(true);
    });
  }
});
