import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** The TypeScript files below `dir` (relative to the root), as root-relative paths with `/`. */
export function sourceFiles(dir: string): string[] {
  return (readdirSync(path.join(repoRoot, dir), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.ts'))
    .map((f) => `${dir}/${f.split(path.sep).join('/')}`);
}

/** The lines of `text` that match any of `patterns`, comment lines left out: what the source checks grep. */
export function matchingCodeLines(text: string, patterns: readonly RegExp[]): string[] {
  return text.split('\n').filter((line) => {
    const t = line.trim();
    if (t.startsWith('*') || t.startsWith('/*') || t.startsWith('//')) return false;
    return patterns.some((re) => re.test(line));
  });
}
