import { Linter } from 'eslint';
import { describe, expect, it } from 'vitest';

/*
 * The size limits count code: a function or a module whose comments and blank lines push it over
 * the line count is not too long. Linted with the rules exactly as eslint.config.js sets them for
 * src/ and scripts/.
 */

// Imported by its URL: the config is plain JavaScript, outside the TypeScript program.
const { default: config } = (await import(new URL('../../eslint.config.js', import.meta.url).href)) as { default: Linter.Config[] };

const SIZE_RULES = ['max-lines', 'max-lines-per-function'];
const sizeRules = Object.fromEntries(
  config
    .filter((c) => c.files?.includes('src/**/*.ts'))
    .flatMap((c) => Object.entries(c.rules ?? {}))
    .filter(([name]) => SIZE_RULES.includes(name)),
);
const limit = (rule: string) => (sizeRules[rule] as [string, { max: number }])[1].max;

const lint = (code: string) =>
  new Linter({ configType: 'flat' })
    .verify(code, [{ languageOptions: { ecmaVersion: 'latest', sourceType: 'module' }, rules: sizeRules }])
    .map((m) => m.ruleId);

/** A function of `statements` lines of code, each with a comment line and a blank line before it. */
const commentedFunction = (name: string, statements: number) =>
  `export function ${name}() {\n${Array.from({ length: statements }, (_, i) => `  // why ${i}\n\n  void ${i};`).join('\n')}\n}\n`;

describe('eslint.config.js: the size limits', () => {
  it('are set for src/ and scripts/', () => {
    expect(Object.keys(sizeRules).sort()).toEqual(SIZE_RULES);
  });

  it('leave comments and blank lines uncounted', () => {
    // Functions just under the per-function limit in code, three times over it in lines; the
    // module likewise.
    const perFunction = limit('max-lines-per-function') - 5;
    const functions = Math.ceil(limit('max-lines') / (3 * perFunction)) + 1;
    const module = Array.from({ length: functions }, (_, i) => commentedFunction(`f${i}`, perFunction)).join('\n');
    expect(module.split('\n').length).toBeGreaterThan(limit('max-lines'));
    expect(functions * (perFunction + 2)).toBeLessThanOrEqual(limit('max-lines'));
    expect(lint(module)).toEqual([]);
  });

  it('still count code', () => {
    expect(lint(commentedFunction('f', limit('max-lines-per-function') + 1))).toContain('max-lines-per-function');
  });
});
