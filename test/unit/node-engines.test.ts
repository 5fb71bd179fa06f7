import { readFileSync } from 'node:fs';
import path from 'node:path';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

/*
 * `npm install` on the Node the README names must not warn that a package wants a newer one: a
 * warning there is a package that may not run at all (OpenTelemetry's 3.x line calls what Node 20
 * lacks). Read from the lock, so the check needs no install and fails on the change that brings
 * such a package in.
 */
const root = path.resolve(import.meta.dirname, '../..');
const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; dev?: boolean; engines?: { node?: string } | string[] }>;
};

/** The oldest Node the README and package.json's engines promise. */
const oldestNode = semver.minVersion(manifest.engines.node)!.version;

/**
 * Dev dependencies allowed to want a newer Node, each with why it stays: a warning at install,
 * never a runtime package.
 */
const ALLOWED = new Map([
  // The benchmark's peer: every 11.x and 12.x wants Node 22, and 10.x has no `key_strict_fifo`,
  // the queue the bench's targets compare with (docs/performance.md).
  ['node_modules/pg-boss', 'the benchmark compares with its keyed queue'],
]);

function wantsNewer(): { name: string; version: string; wants: string; dev: boolean }[] {
  return Object.entries(lock.packages)
    .filter(([name]) => name !== '')
    .flatMap(([name, entry]) => {
      const wants = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      if (!wants || semver.satisfies(oldestNode, wants)) return [];
      return [{ name, version: entry.version ?? '?', wants, dev: entry.dev === true }];
    });
}

describe('the Node the README names', () => {
  it('is accepted by every runtime package in the lock', () => {
    expect(wantsNewer().filter((p) => !p.dev)).toEqual([]);
  });

  it('is accepted by every dev package but those allowed, each with its reason', () => {
    expect(wantsNewer().filter((p) => p.dev && !ALLOWED.has(p.name))).toEqual([]);
  });

  it('is the oldest the engines field admits, and a real version', () => {
    expect(semver.valid(oldestNode)).toBe(oldestNode);
    expect(semver.satisfies(oldestNode, manifest.engines.node)).toBe(true);
  });
});
