import { metLabel } from './lib/markdown.ts';
import type { BenchResults } from './results.ts';
import { SECTIONS } from './sections/index.ts';

/** bench-results.md: the same figures as the JSON, as tables a person reads. */

/** Every section's parts, in the report's order (numbered as the docs cite them, not in the order they run). */
const PARTS = SECTIONS.flatMap((s) => s.markdown).sort((a, b) => a.place - b.place);

export function renderMarkdown(r: BenchResults): string {
  const L = [...header(r), ...PARTS.flatMap((part) => part.render(r)), ...footer(r)];
  return `${L.join('\n')}\n`;
}

/** The run's conditions: when, which code, the load, the machine, the versions, PostgreSQL's settings, the targets. */
function header(r: BenchResults): string[] {
  const L: string[] = [];
  const p = r.params;
  L.push(`# StayHub benchmark results (${r.mode} run)`, '');
  L.push(
    `${r.startedAt} · ${r.durationSeconds ?? '?'} s · each figure is the median of ${p.runs} interleaved run(s), min–max in brackets · one embedded PostgreSQL, a fresh database for every run of every system`,
    '',
    `Code: ${r.code.commit ?? 'unknown commit'}${r.code.dirty ? ` **with uncommitted changes** (${r.code.dirtyFiles.join(', ')})` : r.code.dirty === false ? ' (clean tree)' : ''}.`,
    '',
  );
  const loads = Object.entries(r.load);
  if (loads.length) {
    L.push(
      `Load average (1 min) before each section, on ${loads[0]![1].cores} cores: ${loads.map(([k, l]) => `${k} ${l.loadAverage1m}${l.overloaded ? ' **(over the cores: noisy)**' : ''}`).join(' · ')}.`,
      '',
    );
  }
  const times = Object.entries(r.seconds);
  if (times.length) L.push(`Time per section (s): ${times.map(([k, s]) => `${k} ${s}`).join(' · ')}.`, '');
  L.push('## Machine and versions', '');
  L.push(
    `- CPU: ${r.machine.cpuModel}, ${r.machine.cores} cores; memory ${r.machine.memoryGiB} GiB; ${r.machine.os}; load average at start ${r.machine.loadAverageAtStart.join(' / ')}`,
  );
  const v = r.versions;
  L.push(
    `- Node ${v.node}; PostgreSQL ${v.postgres}; ${v.pgbench ?? 'pgbench not installed'}; ${v.natsServer ?? 'nats-server not installed'}; graphile-worker ${v.graphileWorker}; pg-boss ${v.pgBoss}; autocannon ${v.autocannon}; pg ${v.pg}; fastify ${v.fastify}`,
  );
  L.push(
    `- PostgreSQL settings: ${Object.entries(r.postgresSettings)
      .filter(([k]) => k !== 'server_version')
      .map(([k, s]) => `${k}=${s}`)
      .join(', ')}`,
  );
  L.push('');

  if (r.targets) {
    L.push('## Targets', '', '| Target | Goal | This run | |', '|---|---|---|---|');
    for (const t of r.targets) L.push(`| ${t.name} | ${t.target} | ${t.value} | ${metLabel(t)} |`);
    L.push('');
  }
  return L;
}

/** How each system was run, and the sections that failed. */
function footer(r: BenchResults): string[] {
  const L: string[] = [];
  L.push('## How each system was run', '');
  for (const [k, s] of Object.entries(r.setup)) L.push(`- **${k}**: ${s}`);
  L.push('');
  if (r.errors.length) {
    L.push('## Sections that failed', '');
    for (const e of r.errors) L.push(`- ${e.section}: ${e.message.split('\n')[0]}`);
    L.push('');
  }
  return L;
}
