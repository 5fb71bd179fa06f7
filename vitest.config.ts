import { defineConfig } from 'vitest/config';

// One embedded PostgreSQL for the whole run (test/helpers/global-setup.ts): a template database
// is migrated once, and each test file clones its own database from it.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
    // A developer's .env must not reach the tests or the processes they start (src/env-file.ts).
    env: { ENV_FILE: '' },
  },
});
