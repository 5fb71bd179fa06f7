// A webhook receiver to try StayHub's webhooks on one machine (docs/webhooks.md, "On one machine"):
//
//   STAYHUB_WEBHOOK_SECRET=whsec_… node examples/webhook-receiver.mjs [PORT]   (default 4000)
//
// Node alone, no package. It does what a real receiver must (docs/webhooks.md, "What a receiver
// must do"): verifies the signature on the raw body before reading it, refuses a stale timestamp,
// deduplicates on webhook-id, answers at once. One line per request: the event, or why it was
// refused (401).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const secret = process.env.STAYHUB_WEBHOOK_SECRET ?? '';
if (!secret.startsWith('whsec_')) {
  console.error("Set STAYHUB_WEBHOOK_SECRET to the endpoint's secret (whsec_…): the answer to its registration holds it.");
  process.exit(2);
}
const port = Number(process.argv[2] ?? 4000);

/** Whether one of the request's signatures is ours, over this body, signed within five minutes. */
function verify(headers, rawBody) {
  const id = headers['webhook-id'];
  const ts = Number(headers['webhook-timestamp']);
  if (!id || !Number.isInteger(ts) || Math.abs(Date.now() / 1000 - ts) > 300) return false; // stale: a replay
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const expected = createHmac('sha256', key).update(`${id}.${ts}.${rawBody}`).digest();
  return String(headers['webhook-signature'] ?? '')
    .split(' ')
    .map((s) => Buffer.from(s.replace(/^v1,/, ''), 'base64'))
    .some((sig) => sig.length === expected.length && timingSafeEqual(sig, expected));
}

// Delivery is at least once: the same webhook-id can come twice. A real receiver keeps these in
// its database; a set is enough for a terminal.
const seen = new Set();

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    const rawBody = Buffer.concat(chunks).toString('utf8');
    const id = req.headers['webhook-id'];
    if (!verify(req.headers, rawBody)) {
      console.log(`refused ${id ?? '(no webhook-id)'}: signature not ours, or stale`);
      res.writeHead(401).end();
      return;
    }
    if (seen.has(id)) {
      console.log(`duplicate ${id}: already handled`);
    } else {
      seen.add(id);
      const event = JSON.parse(rawBody);
      const booking = event.data?.bookingId ? ` booking ${event.data.bookingId}` : '';
      console.log(`${event.type}${booking}, signature verified (${id})`);
    }
    res.writeHead(204).end();
  });
});

server.listen(port, '127.0.0.1', () => {
  console.log(`receiving StayHub webhooks on http://127.0.0.1:${server.address().port}/`);
});
