import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { EventEmitter } from 'node:events';
import { createWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { useTestApp } from '../../helpers/app.ts';
import { skipWithout } from '../../helpers/tools.ts';

/*
 * prometheus/alerts.yml and prometheus.yml: parsed and checked for shape here always; checked and
 * unit-tested (prometheus/alerts.test.yml) with Debian's promtool when it is installed
 * (`apt-get install prometheus`). With CI=1 or CI=true a missing promtool fails these, never
 * skips them.
 */

const dir = new URL('../../../prometheus/', import.meta.url);
const read = (name: string) => readFileSync(new URL(name, dir), 'utf8');

type Rule = {
  record?: string;
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
};
const alertsFile = parse(read('alerts.yml')) as { groups: { name: string; rules: Rule[] }[] };
const rules = alertsFile.groups.flatMap((g) => g.rules);
const alerts = rules.filter((r) => r.alert);

const t = useTestApp();

describe('prometheus/alerts.yml', () => {
  it('has the three alerts the outbox needs, each with a severity and what to do', () => {
    expect(alerts.map((a) => a.alert)).toEqual(
      expect.arrayContaining(['OutboxDeadLetters', 'OutboxOldestPendingTooOld', 'OutboxDepthGrowing']),
    );
    for (const a of alerts) {
      expect(a.expr, a.alert).toBeTruthy();
      expect(a.for, a.alert).toMatch(/^\d+[smh]$/);
      expect(['warning', 'critical'], a.alert).toContain(a.labels?.severity);
      expect(a.annotations?.summary, a.alert).toBeTruthy();
      expect(a.annotations?.description?.length ?? 0, a.alert).toBeGreaterThan(60);
      expect(a.annotations?.runbook, a.alert).toBe(`docs/operating.md#${a.alert!.toLowerCase()}`);
    }
    expect(alerts.find((a) => a.alert === 'OutboxDepthGrowing')!.expr).toMatch(/deriv\(.*\[15m\]\)\s*>\s*0/);
  });

  it("each alert's runbook anchor is a heading in docs/operating.md", () => {
    const doc = readFileSync(new URL('../../../docs/operating.md', import.meta.url), 'utf8');
    const headings = new Set(
      doc
        .split('\n')
        .filter((l) => /^#{2,4} /.test(l))
        .map((l) =>
          l
            .replace(/^#+ /, '')
            .trim()
            .toLowerCase()
            .replace(/[^a-z0-9 -]/g, '')
            .replace(/ /g, '-'),
        ),
    );
    for (const a of alerts) expect(headings, a.alert).toContain(a.alert!.toLowerCase());
  });

  it('uses only metric names that the API or the worker actually exports', async () => {
    const api = (await t.app.inject({ method: 'GET', url: '/metrics' })).body;
    const workerMetrics = createWorkerMetrics(new EventEmitter());
    const exported = api + (await workerMetrics.registry.metrics());
    workerMetrics.detach();
    const families = new Set([...exported.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    const recorded = new Set(rules.filter((r) => r.record).map((r) => r.record));
    const used = new Set<string>();
    for (const r of rules) {
      for (const [name] of r.expr.matchAll(/\bstayhub(?:_[a-z_]+|:[a-z_:]+)/g)) {
        used.add(name);
        if (name.includes(':')) expect(recorded, `${r.alert ?? r.record} uses ${name}`).toContain(name);
        else expect(families, `${r.alert ?? r.record} uses ${name}`).toContain(name);
      }
    }
    expect(used.size).toBeGreaterThanOrEqual(6);
  });

  it('prometheus.yml loads alerts.yml and scrapes the API and the worker', () => {
    const config = parse(read('prometheus.yml')) as {
      rule_files: string[];
      scrape_configs: { job_name: string; metrics_path: string; static_configs: { targets: string[] }[] }[];
    };
    expect(config.rule_files).toContain('alerts.yml');
    expect(config.scrape_configs.map((s) => s.job_name).sort()).toEqual(['stayhub-api', 'stayhub-events-earnings', 'stayhub-worker']);
    for (const s of config.scrape_configs) expect(s.metrics_path).toBe('/metrics');
  });
});

describe.skipIf(skipWithout('promtool', undefined, 'Debian: apt-get install -y prometheus'))('promtool', () => {
  const promtool = (...args: string[]) => execFileSync('promtool', args, { cwd: dir, encoding: 'utf8', stdio: 'pipe' });

  it('accepts the config and the rules', () => {
    expect(promtool('check', 'config', 'prometheus.yml')).toMatch(/SUCCESS/);
    expect(promtool('check', 'rules', 'alerts.yml')).toMatch(/SUCCESS/);
  });

  it('passes the alert unit tests (prometheus/alerts.test.yml)', () => {
    expect(promtool('test', 'rules', 'alerts.test.yml')).toMatch(/SUCCESS/);
  });
});
