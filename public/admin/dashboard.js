// The outbox dashboard: vanilla JS against the admin API. Everything shown comes from
// /admin/outbox/* and /admin/events/groups, authorised by the bearer token kept in sessionStorage (gone when the tab closes).
// Every value from the server is put into the page with textContent, never innerHTML: a
// last_error or a payload is data, and must not become markup.
'use strict';

(() => {
  const TOKEN_KEY = 'stayhub.adminToken';
  const params = new URLSearchParams(location.search);
  // ?refresh=ms lets a test (or an impatient operator) refresh faster; bounded to 1–60 s.
  const REFRESH_MS = Math.min(60_000, Math.max(1_000, Number(params.get('refresh')) || 5_000));
  const DEAD_PAGE = 100;

  const $ = (id) => document.getElementById(id);
  const el = (tag, props = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === 'class') node.className = v;
      else if (k === 'text') node.textContent = v;
      else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else if (k in node) node[k] = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  };

  let timer = null;
  const selected = new Set();
  let lastDead = [];

  // ---------------------------------------------------------------- API

  class SignedOut extends Error {}

  async function api(path, { method = 'GET', body } = {}) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new SignedOut();
    const headers = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (res.status === 401 || res.status === 403) {
      sessionStorage.removeItem(TOKEN_KEY);
      throw new SignedOut(res.status === 403 ? 'This account is not an admin.' : 'Your session has ended. Sign in again.');
    }
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    if (!res.ok) throw new Error((data && (data.detail || data.title)) || `HTTP ${res.status}`);
    return data;
  }

  // ---------------------------------------------------------------- sign-in

  function showSignIn(message = '') {
    stopRefresh();
    $('dashboard').hidden = true;
    $('sign-out').hidden = true;
    $('sign-in').hidden = false;
    $('sign-in-error').textContent = message;
    setStatus('');
    $('email').focus();
  }

  function showDashboard() {
    $('sign-in').hidden = true;
    $('dashboard').hidden = false;
    $('sign-out').hidden = false;
    refresh();
  }

  $('sign-in-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const button = $('sign-in-button');
    button.disabled = true;
    $('sign-in-error').textContent = '';
    try {
      const res = await fetch('/auth/login', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: $('email').value, password: $('password').value }),
      });
      const data = await res.json().catch(() => null);
      if (!res.ok) throw new Error((data && (data.detail || data.title)) || `HTTP ${res.status}`);
      if (data.user.role !== 'admin') {
        // Do not keep a non-admin's session open in this tab.
        await fetch('/auth/logout', { method: 'POST', headers: { authorization: `Bearer ${data.token}` } });
        throw new Error('This account is not an admin.');
      }
      sessionStorage.setItem(TOKEN_KEY, data.token);
      $('password').value = '';
      showDashboard();
    } catch (err) {
      $('sign-in-error').textContent = err.message;
    } finally {
      button.disabled = false;
    }
  });

  $('sign-out').addEventListener('click', async () => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.removeItem(TOKEN_KEY);
    if (token) await fetch('/auth/logout', { method: 'POST', headers: { authorization: `Bearer ${token}` } }).catch(() => {});
    showSignIn();
  });

  // ---------------------------------------------------------------- refresh loop

  function stopRefresh() {
    clearTimeout(timer);
    timer = null;
  }

  function setStatus(text, failed = false) {
    $('status').textContent = text;
    $('status').classList.toggle('failed', failed);
  }

  async function refresh() {
    stopRefresh();
    try {
      // NATS being down (503) must not stop the outbox panels from refreshing: the groups'
      // answer or error is kept apart and shown in their own panel.
      const groupsRead = api('/admin/events/groups').then(
        (ok) => ({ ok }),
        (err) => ({ err }),
      );
      const webhooksRead = api('/admin/webhooks').then(
        (ok) => ({ ok }),
        (err) => ({ err }),
      );
      const [stats, dead, depth, groups, webhooks] = await Promise.all([
        api('/admin/outbox/stats'),
        api(`/admin/outbox/messages?status=DEAD&limit=${DEAD_PAGE}`),
        api('/admin/outbox/depth?minutes=60'),
        groupsRead,
        webhooksRead,
      ]);
      if (groups.err instanceof SignedOut) throw groups.err;
      if (webhooks.err instanceof SignedOut) throw webhooks.err;
      renderNumbers(stats);
      renderTopics(stats);
      renderDead(dead.items, stats.dead);
      renderChart(depth.points);
      renderGroups(groups);
      renderWebhooks(webhooks);
      setStatus(`Updated ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      if (err instanceof SignedOut) return showSignIn(err.message);
      // Keep the last numbers on screen, and say they are stale.
      setStatus(`Refresh failed: ${err.message}`, true);
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && !$('dashboard').hidden) refresh();
  });

  // ---------------------------------------------------------------- rendering

  const fmt = (n) => n.toLocaleString();
  /** "1 event", "2 events", "0 events": a count with its noun, in the singular only for one. */
  const count = (n, one, many = `${one}s`) => `${fmt(n)} ${n === 1 ? one : many}`;
  /** "the dead message", "all 3 dead messages": what a topic's "Retry all" replays. */
  const allDead = (n) => (n === 1 ? 'the dead message' : `all ${count(n, 'dead message')}`);
  // A line may break after a dot in a topic name ('booking.<here>created') on a narrow screen.
  const breakable = (topic) => topic.replace(/\./g, '.\u200b');

  function age(seconds) {
    if (seconds === null || seconds === undefined) return '—';
    if (seconds < 60) return `${seconds}s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${seconds % 60}s`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
    return `${Math.floor(seconds / 86400)}d ${Math.floor((seconds % 86400) / 3600)}h`;
  }

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');

  function renderNumbers(s) {
    $('n-pending').textContent = fmt(s.pending);
    $('n-leased').textContent = `${fmt(s.leased)} being handled`;
    $('n-oldest').textContent = age(s.oldestPendingAgeSeconds);
    $('n-oldest-sub').textContent = s.oldestPendingAgeSeconds == null ? 'nothing pending' : 'waiting since created';
    $('n-dead').textContent = fmt(s.dead);
    $('n-done').textContent = fmt(s.doneLastHour);
    $('card-dead').classList.toggle('alarm', s.dead > 0);
    // Past ten minutes the worker is stuck or down (docs/operating.md has the reasoning).
    $('card-oldest').classList.toggle('alarm', (s.oldestPendingAgeSeconds ?? 0) > 600);
    const unknown = $('unknown-topics');
    unknown.hidden = s.unknownTopics.length === 0;
    unknown.textContent = s.unknownTopics.length
      ? `No handler for: ${s.unknownTopics.join(', ')}. These messages stay pending until a worker that handles them is deployed.`
      : '';
  }

  function renderTopics(s) {
    const body = $('topics').tBodies[0];
    const rows = s.byTopic.map((t) => {
      const retry =
        t.dead > 0
          ? el('button', {
              type: 'button',
              class: 'small',
              text: 'Retry all',
              'aria-label': `Retry ${allDead(t.dead)} of ${t.topic}`,
              onclick: () => retryTopic(t.topic, t.dead),
            })
          : '';
      return el(
        'tr',
        { class: t.handled ? '' : 'unhandled', 'data-topic': t.topic },
        el('td', { text: breakable(t.topic), title: t.topic }),
        el('td', { class: 'num', text: fmt(t.pending) }),
        el('td', { class: 'num', text: fmt(t.leased) }),
        el('td', { class: t.dead > 0 ? 'num bad' : 'num', text: fmt(t.dead) }),
        el('td', { class: 'num', text: fmt(t.doneLastHour) }),
        el('td', { class: 'num', text: age(t.oldestPendingAgeSeconds) }),
        el('td', {}, retry),
      );
    });
    if (!rows.length) rows.push(el('tr', {}, el('td', { colSpan: 7, class: 'muted', text: 'No messages in the last hour.' })));
    body.replaceChildren(...rows);
  }

  /** The events stream's consumer groups, or one line when there is no events relay. */
  function renderGroups({ ok, err }) {
    const panel = $('groups-panel');
    const failed = $('groups-error');
    if (err) {
      // Only a configured relay can fail: show the panel, keep the last rows, say they are stale.
      panel.hidden = false;
      $('groups-off').hidden = true;
      failed.hidden = false;
      failed.textContent = `Not refreshed: ${err.message}`;
      return;
    }
    failed.hidden = true;
    $('groups-off').hidden = ok.configured;
    panel.hidden = !ok.configured;
    if (!ok.configured) return;
    const { stream } = ok;
    $('groups-stream').textContent = stream.exists
      ? `(stream ${stream.name}, ${count(stream.messages, 'event')})`
      : `(stream ${stream.name})`;
    const note = $('groups-note');
    const lost = ok.groups.filter((g) => g.eventsAgedOut).map((g) => g.name);
    note.hidden = stream.exists && !lost.length;
    note.className = lost.length ? 'error' : 'muted';
    note.textContent = !stream.exists
      ? `Stream ${stream.name} does not exist yet: the worker creates it when it starts with NATS_URL set.`
      : lost.length
        ? `Events aged out of the stream before ${lost.join(', ')} read them (it now starts at event ${fmt(stream.firstSeq)}` +
          `${stream.firstAt ? `, ${new Date(stream.firstAt).toLocaleString()}` : ''}): ` +
          `${lost.length > 1 ? 'their ledgers miss' : 'its ledger misses'} them until rebuilt: ` +
          'npm run consume:earnings -- --group NAME --replay --accept-gap.'
        : '';
    $('groups').hidden = !stream.exists;
    const rows = ok.groups.map((g) => {
      const behind = g.pending + g.ackPending > 0;
      return el(
        'tr',
        {
          'data-group': g.name,
          class: g.eventsAgedOut ? 'aged-out' : '',
          title: g.eventsAgedOut ? 'Events this group had not read aged out of the stream: its ledger misses them.' : '',
        },
        el('td', { text: g.name }),
        el('td', { class: 'num', text: fmt(g.pending) }),
        el('td', { class: 'num', text: fmt(g.ackPending) }),
        el('td', { class: 'num', text: behind ? age(Math.round(g.oldestUnackedAgeSeconds)) : '—', title: behind ? '' : 'caught up' }),
        el('td', { class: g.openDeadLetters > 0 ? 'num bad' : 'num', text: fmt(g.openDeadLetters) }),
      );
    });
    if (!rows.length && stream.exists)
      rows.push(el('tr', {}, el('td', { colSpan: 5, class: 'muted', text: 'No consumer groups on the stream.' })));
    $('groups').tBodies[0].replaceChildren(...rows);
  }

  /** Each host's endpoint: its state, what waits, what failed, and the last failed attempts (GET /admin/webhooks). */
  function renderWebhooks({ ok, err }) {
    const failed = $('webhooks-error');
    failed.hidden = !err;
    if (err) {
      failed.textContent = `Not refreshed: ${err.message}`;
      return;
    }
    const items = ok.items;
    $('webhooks-count').textContent = `(${count(items.length, 'endpoint')})`;
    $('webhooks-empty').hidden = items.length > 0;
    $('webhooks').hidden = items.length === 0;
    const stateText = (e) =>
      e.health.state === 'disabled'
        ? `disabled${e.disabledReason ? `: ${e.disabledReason}` : ' by its host'}`
        : e.health.state === 'failing'
          ? `failing since ${when(e.health.failingSince)}`
          : e.health.state;
    const failure = (f) =>
      `${new Date(f.at).toLocaleTimeString()} ${f.eventType}: ${f.responseStatus === null ? f.error : `HTTP ${f.responseStatus}`}` +
      (f.traceId ? ` (trace ${f.traceId})` : '');
    const rows = items.map((e) => {
      const oldest = e.health.oldestPendingAt ? Math.round((Date.now() - Date.parse(e.health.oldestPendingAt)) / 1000) : null;
      const bad = e.health.state === 'failing' || (e.health.state === 'disabled' && e.disabledReason);
      return el(
        'tr',
        { 'data-endpoint': e.id, class: bad ? 'webhook-bad' : '' },
        el('td', {}, el('span', { class: 'mono', text: e.url }), el('br'), el('span', { class: 'muted', text: e.hostEmail })),
        el('td', { class: bad ? 'bad' : '', text: stateText(e) }),
        el('td', { class: 'num', text: fmt(e.health.pendingDeliveries) }),
        el('td', { class: 'num', text: oldest === null ? '—' : age(Math.max(0, oldest)) }),
        el('td', { class: e.health.failedDeliveries > 0 ? 'num bad' : 'num', text: fmt(e.health.failedDeliveries) }),
        el('td', { class: 'small-text', text: e.recentFailures.length ? e.recentFailures.slice(0, 3).map(failure).join(' · ') : '—' }),
      );
    });
    $('webhooks').tBodies[0].replaceChildren(...rows);
  }

  function renderDead(items, total) {
    lastDead = items;
    const ids = new Set(items.map((m) => m.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    $('dead-count').textContent = total > items.length ? `(${fmt(items.length)} newest of ${fmt(total)})` : `(${fmt(total)})`;
    $('dead-empty').hidden = items.length > 0;
    $('dead').hidden = items.length === 0;
    $('dead').tBodies[0].replaceChildren(
      ...items.map((m) =>
        el(
          'tr',
          { 'data-id': m.id },
          el(
            'td',
            {},
            el('input', {
              type: 'checkbox',
              checked: selected.has(m.id),
              'aria-label': `Select ${m.id}`,
              onchange: (e) => {
                e.target.checked ? selected.add(m.id) : selected.delete(m.id);
                updateSelection();
              },
            }),
          ),
          el(
            'td',
            {},
            el('button', { type: 'button', class: 'link', title: m.id, text: m.id.slice(0, 8), onclick: () => showDetail(m.id) }),
            // The request's trace (tracing on when it was written): the id to look up in the tracing backend.
            ...(m.traceId ? [el('br'), el('span', { class: 'mono muted trace-id', title: `trace ${m.traceId}`, text: m.traceId })] : []),
          ),
          el('td', { text: breakable(m.topic), title: m.topic }),
          el('td', { class: 'num', text: String(m.attempts) }),
          el('td', { text: when(m.processedAt) }),
          el('td', { class: 'error-text', text: m.lastError ?? '' }),
          el('td', {}, el('button', { type: 'button', class: 'small retry', text: 'Retry', onclick: () => retryOne(m) })),
        ),
      ),
    );
    updateSelection();
  }

  function updateSelection() {
    $('retry-selected').disabled = selected.size === 0;
    $('retry-selected').textContent = selected.size ? `Retry selected (${selected.size})` : 'Retry selected';
    $('select-all').checked = lastDead.length > 0 && selected.size === lastDead.length;
  }

  $('select-all').addEventListener('change', (e) => {
    selected.clear();
    if (e.target.checked) for (const m of lastDead) selected.add(m.id);
    for (const box of $('dead').tBodies[0].querySelectorAll('input[type=checkbox]')) box.checked = e.target.checked;
    updateSelection();
  });

  const SVG = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  };

  function renderChart(points) {
    const W = 600,
      H = 160,
      PAD = 6;
    const peak = Math.max(0, ...points.map((p) => Math.max(p.pending, p.dead)));
    // A flat chart still needs a scale to draw its zero line; the label must not claim it as a peak.
    const max = Math.max(1, peak);
    const t0 = points.length ? new Date(points[0].at).getTime() : 0;
    const t1 = points.length ? new Date(points[points.length - 1].at).getTime() : 0;
    const x = (p) => ((new Date(p.at).getTime() - t0) / Math.max(1, t1 - t0)) * W;
    const y = (v) => H - PAD - (v / max) * (H - 2 * PAD);
    const line = (key) => points.map((p) => `${x(p).toFixed(1)},${y(p[key]).toFixed(1)}`).join(' ');
    const chart = $('chart');
    chart.replaceChildren(
      ...[0.25, 0.5, 0.75].map((f) => svg('line', { class: 'grid', x1: 0, x2: W, y1: y(max * f), y2: y(max * f) })),
      svg('polygon', { class: 'pending-area', points: `0,${H} ${line('pending')} ${W},${H}` }),
      svg('polyline', { class: 'pending', points: line('pending') }),
      svg('polyline', { class: 'dead', points: line('dead') }),
    );
    $('chart-max').textContent = !points.length ? 'no data' : peak === 0 ? 'none pending or dead' : `max ${fmt(peak)}`;
  }

  // ---------------------------------------------------------------- actions

  async function act(confirmText, path, body) {
    if (!confirm(confirmText)) return;
    try {
      const result = await api(path, { method: 'POST', body });
      setStatus(`${count(result.affected, 'message')} back to pending`);
      for (const id of result.messageIds) selected.delete(id);
    } catch (err) {
      if (err instanceof SignedOut) return showSignIn(err.message);
      alert(`Retry failed: ${err.message}`);
    }
    refresh();
  }

  const REPLAY_NOTE = 'It goes back to PENDING with its attempts reset; handlers that already succeeded for it are not run again.';

  function retryOne(m) {
    return act(`Retry message ${m.id} (${m.topic})?\n\n${REPLAY_NOTE}`, `/admin/outbox/messages/${m.id}/retry`);
  }

  $('retry-selected').addEventListener('click', () => {
    const ids = [...selected];
    if (ids.length) act(`Retry ${count(ids.length, 'dead message')}?\n\n${REPLAY_NOTE}`, '/admin/outbox/retry', { ids });
  });

  function retryTopic(topic, dead) {
    return act(`Retry ${allDead(dead)} of ${topic}?\n\n${REPLAY_NOTE}`, '/admin/outbox/retry', { topic });
  }

  async function showDetail(id) {
    try {
      const m = await api(`/admin/outbox/messages/${id}`);
      $('detail-id').textContent = m.id;
      const fields = [
        ['Topic', m.topic],
        ['Key', m.key ?? '—'],
        ['Status', m.leased ? `${m.status} (leased)` : m.status],
        ['Attempts', String(m.attempts)],
        ['Available at', when(m.availableAt)],
        ...(m.leasedUntil ? [['Lease runs out', when(m.leasedUntil)]] : []),
        ['Last error', m.lastError ?? '—'],
        ['Trace', m.traceId ?? '— (not traced)'],
        ['Handlers', m.handlers.length ? m.handlers.map((h) => `${h.name}: ${h.state}`).join(', ') : m.handlersDone.join(', ') || '—'],
      ];
      $('detail-fields').replaceChildren(...fields.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
      $('detail-history').replaceChildren(
        ...m.history.map((h) => el('li', { text: `${when(h.at)} — ${h.event}${h.detail ? `: ${h.detail}` : ''}` })),
      );
      $('detail-payload').textContent = JSON.stringify(m.payload, null, 2);
      $('detail').hidden = false;
      $('detail').scrollIntoView({ behavior: 'smooth', block: 'start' });
    } catch (err) {
      if (err instanceof SignedOut) return showSignIn(err.message);
      alert(`Could not load the message: ${err.message}`);
    }
  }

  $('detail-close').addEventListener('click', () => {
    $('detail').hidden = true;
  });

  // ---------------------------------------------------------------- start

  if (sessionStorage.getItem(TOKEN_KEY)) showDashboard();
  else showSignIn();
})();
