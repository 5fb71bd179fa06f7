// @ts-check
/*
 * ESLint: the rules that catch bugs the compiler lets through (a promise nobody awaits, an async
 * function where a callback's result is ignored, an `any` flowing into typed code, `==`), with
 * type information from tsconfig.json. Formatting is Prettier's (eslint-config-prettier turns off
 * every rule it would fight). `npm run lint` fails on any error or warning.
 *
 * Type information costs a whole type-check (~35 s of CPU for the tree, like `tsc --noEmit`), so
 * `npm run lint` keeps a cache (node_modules/.cache/eslint/, by content) and lints only the files
 * that changed. A type-aware result can depend on another file (a function that became async):
 * CI starts without the cache and lints everything; locally, `rm -rf node_modules/.cache/eslint`
 * does the same.
 */
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  {
    ignores: ['node_modules/', 'dist/', 'var/', '.data/', 'coverage/', 'test-artifacts/', '.build-test-*/', 'migrations/'],
  },

  // Everything: JavaScript's recommended rules and a few of our own.
  js.configs.recommended,
  {
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // `x == null` (null or undefined) is the one loose comparison allowed.
      eqeqeq: ['error', 'always', { null: 'ignore' }],
    },
  },

  // TypeScript: what tsconfig.json includes (src/, scripts/, test/, the tools' *.config.ts), each
  // file linted with the program's types. A .ts file elsewhere (a scratch file) is not linted.
  {
    files: ['src/**/*.ts', 'scripts/**/*.ts', 'test/**/*.ts', '*.config.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
      globals: { ...globals.node },
    },
    rules: {
      // Errors everywhere: each of these is a bug more often than not.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unsafe-argument': 'error',
      '@typescript-eslint/no-unsafe-assignment': 'error',
      '@typescript-eslint/no-unsafe-call': 'error',
      '@typescript-eslint/no-unsafe-member-access': 'error',
      '@typescript-eslint/no-unsafe-return': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          // `const { secret, ...rest } = x` drops `secret` on purpose.
          ignoreRestSiblings: true,
        },
      ],
      // Off: style, not bugs.
      // A Fastify plugin or an interface's method is `async` with no `await` by design.
      '@typescript-eslint/require-await': 'off',
      // An explicit `any` at a boundary is a choice; the no-unsafe-* rules catch where it leaks.
      '@typescript-eslint/no-explicit-any': 'off',
      // A harmless cast; removing them all is churn.
      '@typescript-eslint/no-unnecessary-type-assertion': 'off',
    },
  },

  // The application: logs go through pino, never the console.
  {
    files: ['src/**/*.ts'],
    rules: {
      'no-console': 'error',
    },
  },

  // Size: a function that reads on one screen, a module read in one sitting, counted in lines of
  // code: comments and blank lines are not counted, so a comment that says why never pushes code
  // into a split. A long one is split by meaning, never squeezed. Tests are exempt: a table of
  // cases is long by nature.
  {
    files: ['src/**/*.ts', 'scripts/**/*.ts'],
    rules: {
      'max-lines-per-function': ['error', { max: 80, skipComments: true, skipBlankLines: true }],
      'max-lines': ['error', { max: 400, skipComments: true, skipBlankLines: true }],
    },
  },

  // Tests read response bodies (`res.json()`, `inject().json()`) as `any` on purpose: the
  // assertions check their shape. The promise rules stay errors here too.
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },

  // The chaos run's HTTP client hands back whatever the server answered (JSON, text or nothing)
  // as `any`, on purpose: the run's verdict is what checks it. The promise rules stay errors.
  {
    files: ['scripts/chaos/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },

  // Plain JavaScript config files for Node (ES modules unless .cjs): no type information.
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ignores: ['public/**'],
    languageOptions: { globals: { ...globals.node } },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
  },

  // The admin dashboard: a plain script for the browser, no build step.
  {
    files: ['public/**/*.js'],
    languageOptions: { sourceType: 'script', globals: { ...globals.browser } },
  },

  prettier,
);
