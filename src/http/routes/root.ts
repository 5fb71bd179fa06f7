import type { FastifyPluginAsync } from 'fastify';

/*
 * GET /: the front door. A person who opens the API's address in a browser learns where to go;
 * a program that asks for JSON gets the same links as data. Hidden from the OpenAPI document:
 * it is a signpost, not part of the API's contract.
 */

export const ROOT_LINKS = [
  { rel: 'docs', href: '/docs', title: 'API documentation (OpenAPI, try it out)' },
  { rel: 'openapi', href: '/docs/json', title: 'The OpenAPI document' },
  { rel: 'dashboard', href: '/admin', title: 'Outbox dashboard (admins)' },
  { rel: 'health', href: '/health', title: 'Health: database and outbox' },
  { rel: 'metrics', href: '/metrics', title: 'Prometheus metrics' },
] as const;

/** The q-value the Accept header gives `type` (exact, `type/*` or `*\/*`); no header accepts anything. */
export function acceptQuality(accept: string | undefined, type: string): number {
  if (!accept) return 1;
  const [major] = type.split('/');
  let best = -1;
  let bestSpecificity = -1;
  for (const part of accept.split(',')) {
    const [range = '', ...params] = part.trim().toLowerCase().split(';');
    const specificity = range === type ? 2 : range === `${major}/*` ? 1 : range === '*/*' ? 0 : -1;
    if (specificity < 0 || specificity < bestSpecificity) continue;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const quality = q ? Number(q.slice(2)) : 1;
    if (specificity > bestSpecificity || quality > best) {
      best = Number.isFinite(quality) ? quality : 0;
      bestSpecificity = specificity;
    }
  }
  return Math.max(best, 0);
}

/** JSON only when the client prefers it to HTML: browsers (and `*\/*`) get the page. */
export const wantsJson = (accept: string | undefined) => acceptQuality(accept, 'application/json') > acceptQuality(accept, 'text/html');

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// No inline style or script: helmet's Content-Security-Policy forbids them, and none is needed.
const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>StayHub API</title>
  <link rel="icon" href="data:,">
</head>
<body>
  <h1>StayHub API</h1>
  <p>A booking API whose side effects go through a transactional outbox and a separate worker.</p>
  <ul>
${ROOT_LINKS.map((l) => `    <li><a href="${escapeHtml(l.href)}">${escapeHtml(l.href)}</a> · ${escapeHtml(l.title)}</li>`).join('\n')}
  </ul>
  <p>No admin account yet? <code>npm run create-admin -- --email you@example.com --name "You"</code>.
     Demo data: <code>npm run seed</code>.</p>
</body>
</html>
`;

export const rootRoutes: FastifyPluginAsync = async (app) => {
  app.get('/', { schema: { hide: true } }, async (request, reply) => {
    reply.header('vary', 'Accept');
    if (wantsJson(request.headers.accept)) {
      return reply.type('application/json; charset=utf-8').send(JSON.stringify({ name: 'StayHub API', links: ROOT_LINKS }));
    }
    return reply.type('text/html; charset=utf-8').send(PAGE);
  });
};
