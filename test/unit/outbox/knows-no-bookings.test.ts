import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/*
 * src/outbox/ is a library: it knows topics, payloads and handlers only as what the application
 * registers (src/messages/, ADR 0037). The dependency rules keep it from importing the application
 * (.dependency-cruiser.cjs); this keeps the application's words out of it too, comments included,
 * so the module reads as what another application would copy.
 */

const outbox = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../src/outbox');
const files = (readdirSync(outbox, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'));

describe('the outbox module', () => {
  it('never says booking, comments included', () => {
    expect(files.length).toBeGreaterThan(10);
    const named = files.filter((f) => /booking/i.test(readFileSync(path.join(outbox, f), 'utf8')));
    expect(named).toEqual([]);
  });
});
