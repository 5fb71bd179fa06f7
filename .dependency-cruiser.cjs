/*
 * The layers of src/, checked by `npm run depcheck` (dependency-cruiser). Every rule is an error:
 * the check exits non-zero on any violation. Type-only imports count (tsPreCompilationDeps): a
 * `import type` cycle or layer breach is still one.
 *
 *   src/commands/            the commands (one file per npm script), imported by nothing in src/
 *   src/http/, src/worker/   the API and the worker, imported by nothing else in src/ but the commands
 *   src/messages/            the application's topics, payload schemas and subscriptions: the
 *                            API<->worker contract, registered with the outbox, below both sides
 *   src/outbox/              a library with one public surface, src/outbox/index.ts; inside it the
 *                            runner (runner/) sits above the store (the SQL verbs, settle.ts)
 *   src/db/                  the bottom: it sees only src/config.ts and src/logger.ts
 *
 * scripts/ (the developer's tools, the bench, the chaos run) is cruised for cycles and for the outbox's
 * surface, and test/ for the outbox's surface: both reach src/outbox/ through its index, or through
 * src/outbox/testing.ts (rows written and read directly, statements measured one at a time), never
 * a file behind them. SQL naming the outbox's tables outside src/outbox/ is a test's to catch
 * (test/unit/outbox/sql-stays-inside.test.ts): the cruiser sees imports only.
 */

/** Domain modules: business rules, below the entry points. */
const DOMAIN = '^src/(bookings|properties|users|search|events|mail)/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'No import cycle in src/ or scripts/, type-only imports included. src/http/context.ts exists so routes need not import app.ts.',
      from: { path: '^(src|scripts)/' },
      to: { circular: true },
    },
    {
      name: 'commands-are-the-top',
      severity: 'error',
      comment:
        'src/commands/ holds the processes a person or an image starts (runMain): nothing in src/, another command ' +
        'included, imports one. Tests and the bench may, to run a command in-process.',
      from: { path: '^src/' },
      to: { path: '^src/commands/' },
    },
    {
      name: 'domain-not-to-entry-points',
      severity: 'error',
      comment: 'A domain module never imports the HTTP layer or the worker: they import it.',
      from: { path: DOMAIN },
      to: { path: '^src/(http|worker)/' },
    },
    {
      name: 'entry-points-are-the-top',
      severity: 'error',
      comment:
        'src/http/ and src/worker/ are the API and the worker: nothing else in src/ (src/process/ included) imports them, ' +
        'but the commands that start them.',
      from: { path: '^src/', pathNot: ['^src/(http|worker|commands)/', DOMAIN] },
      to: { path: '^src/(http|worker)/' },
    },
    {
      name: 'db-is-the-bottom',
      severity: 'error',
      comment: 'src/db/ imports nothing from src/ but itself, src/config.ts and src/logger.ts.',
      from: { path: '^src/db/' },
      to: { path: '^src/', pathNot: ['^src/db/', '^src/config\\.ts$', '^src/logger\\.ts$'] },
    },
    {
      name: 'outbox-through-its-index',
      severity: 'error',
      comment:
        'Outside src/outbox/, the outbox is src/outbox/index.ts (its public surface), and for tests, the bench and the chaos run ' +
        'src/outbox/testing.ts (direct rows, statements one at a time); never a file behind them.',
      from: { path: '^(src|scripts|test)/', pathNot: '^src/outbox/' },
      to: { path: '^src/outbox/', pathNot: '^src/outbox/(index|testing)\\.ts$' },
    },
    {
      name: 'outbox-testing-not-in-production',
      severity: 'error',
      comment: "src/outbox/testing.ts writes rows the product never writes: the API's and the worker's code (src/) never imports it.",
      from: { path: '^src/', pathNot: '^src/outbox/' },
      to: { path: '^src/outbox/testing\\.ts$' },
    },
    {
      name: 'outbox-knows-no-feature',
      severity: 'error',
      comment:
        'The outbox is a library: it knows topics, payload schemas and handlers only as what the application registers. ' +
        'It imports nothing of src/ but itself, src/db/ (its tables, pool and transactions), src/logger.ts, and ' +
        'src/telemetry/tracing.ts: a message carries the trace of the request that wrote it (enqueue stores the active ' +
        'span context, the runner continues it). Never src/config.ts: the application maps its configuration to the ' +
        "runner's settings (src/worker/outbox-worker.ts).",
      from: { path: '^src/outbox/' },
      to: { path: '^src/', pathNot: ['^src/outbox/', '^src/db/', '^src/logger\\.ts$', '^src/telemetry/tracing\\.ts$'] },
    },
    {
      name: 'outbox-store-below-runner',
      severity: 'error',
      comment:
        'Inside the outbox the runner (src/outbox/runner/) uses the store (the SQL verbs, settle.ts), never the other way: ' +
        'what both need is in src/outbox/types.ts. Only the public surface, src/outbox/index.ts, exports the runner ' +
        '(and src/outbox/testing.ts its pure parts, for unit tests).',
      from: { path: '^src/outbox/', pathNot: ['^src/outbox/runner/', '^src/outbox/(index|testing)\\.ts$'] },
      to: { path: '^src/outbox/runner/' },
    },
    {
      name: 'messages-is-the-contract',
      severity: 'error',
      comment:
        'src/messages/ (topics, payload schemas, subscriptions, the typed enqueue) is imported by the API and the worker ' +
        'alike: it imports only itself, the outbox through its index, and src/db/ (the transaction type).',
      from: { path: '^src/messages/' },
      to: { path: '^src/', pathNot: ['^src/messages/', '^src/outbox/index\\.ts$', '^src/db/'] },
    },
    {
      name: 'no-unresolvable',
      severity: 'error',
      comment: 'An import the cruiser cannot resolve would slip past every rule above.',
      from: { path: '^src/' },
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    // `import type` and type-only specifiers are dependencies too.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
    reporterOptions: {
      text: { highlightFocused: true },
    },
  },
};
