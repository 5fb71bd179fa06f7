// The webhook portal: vanilla JS against the webhooks API (/webhooks/*), the same routes a host's
// own software calls, with the host's session or a portal link as the bearer token (kept in
// sessionStorage: gone when the tab closes). Everything from the server, above all what a
// receiver answered, is put into the page with textContent, never innerHTML: it is data, and
// must not become markup. A signing secret is shown once, then removed from the page.
'use strict';

(() => {
  const TOKEN_KEY = 'stayhub.portalToken';
  const params = new URLSearchParams(location.search);
  // ?refresh=ms lets a test (or an impatient developer) poll faster; bounded to 0.5–60 s.
  const REFRESH_MS = Math.min(60_000, Math.max(500, Number(params.get('refresh')) || 3_000));
  const PAGE = 20;
  const BODY_SHOWN = 1024;

  const $ = (id) => document.getElementById(id);
  const el = (tag, props = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null) continue;
      if (k === 'class') node.className = v;
      else if (k === 'text') node.textContent = v;
      else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else if (k in node && typeof v !== 'string') node[k] = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  };

  // ---------------------------------------------------------------- hostile text

  // Control, bidirectional and zero-width characters: shown as their code, so an answer cannot
  // reorder, hide or fake the text around it. NUL arrives as U+FFFD (the server cannot store it).
  // eslint-disable-next-line no-control-regex
  const UNSAFE = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\u200B-\u200F\u202A-\u202E\u2060-\u2069\uFEFF]/g;

  /** Text a receiver sent, made inert and bounded: shown with textContent only. */
  function inert(text, max = BODY_SHOWN) {
    if (text === null || text === undefined) return '';
    let s = String(text);
    let more = '';
    if (s.length > max) {
      more = `\n… ${s.length - max} more characters not shown`;
      s = s.slice(0, max);
    }
    return s.replace(UNSAFE, (c) => `\\u{${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}}`) + more;
  }

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');
  function ago(iso) {
    if (!iso) return '—';
    const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
    if (s < 60) return `${s}s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return `${Math.floor(s / 86400)} d ago`;
  }
  const rate = (w) =>
    w.attempts === 0 ? 'no attempts' : `${Math.round((100 * w.succeeded) / w.attempts)}% (${w.succeeded} of ${w.attempts})`;
  const answerOf = (a) =>
    a.responseStatus !== null ? `HTTP ${a.responseStatus}${a.error ? ` — ${a.error}` : ''}` : a.error || 'no answer';
  const toLocalInput = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
  const fromLocalInput = (v) => (v ? new Date(v).toISOString() : undefined);

  // ---------------------------------------------------------------- API

  class SignedOut extends Error {}

  let me = null; // GET /webhooks/portal/session

  async function api(path, { method = 'GET', body } = {}) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new SignedOut();
    const headers = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (res.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      throw new SignedOut(token.startsWith('whpl_') ? 'link' : 'Your session has ended. Sign in again.');
    }
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    if (!res.ok) {
      const err = new Error((data && (data.detail || data.title)) || `HTTP ${res.status}`);
      // The API's own words, field by field ("body.url: …"), so the portal refuses as the API does.
      err.fields = (data && data.errors) || [];
      err.status = res.status;
      throw err;
    }
    return data;
  }

  const problemText = (err) =>
    err.fields && err.fields.length ? err.fields.map((f) => `${f.path}: ${f.message}`).join('\n') : err.message;

  function setStatus(text) {
    $('status').textContent = text;
  }
  function say(text) {
    $('error').hidden = true;
    $('outcome').textContent = text;
    $('outcome').hidden = !text;
  }
  function fail(err) {
    if (err instanceof SignedOut) return signedOut(err.message);
    $('outcome').hidden = true;
    $('error').textContent = problemText(err);
    $('error').hidden = false;
  }

  // ---------------------------------------------------------------- signing in, or a link

  function takeLinkFromUrl() {
    const m = /^#link=(whpl_[A-Za-z0-9_-]{20,200})$/.exec(location.hash);
    if (!m) return;
    sessionStorage.setItem(TOKEN_KEY, m[1]);
    // Out of the address bar and the history at once: the link is a credential.
    history.replaceState(null, '', `${location.pathname}${location.search}#/`);
  }

  function signedOut(message) {
    stopPolling();
    me = null;
    forgetSecret();
    $('app').hidden = true;
    $('sign-out').hidden = true;
    $('who').textContent = '';
    setStatus('');
    if (message === 'link') {
      $('sign-in').hidden = true;
      $('link-ended').hidden = false;
      return;
    }
    $('link-ended').hidden = true;
    $('sign-in').hidden = false;
    $('sign-in-error').textContent = message || '';
    $('email').focus();
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
      if (data.user.role !== 'host') throw new Error('The portal is for hosts: this account is not a host.');
      sessionStorage.setItem(TOKEN_KEY, data.token);
      $('password').value = '';
      await start();
    } catch (err) {
      $('sign-in-error').textContent = err.message;
    } finally {
      button.disabled = false;
    }
  });

  $('sign-out').addEventListener('click', async () => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.removeItem(TOKEN_KEY);
    if (token && !token.startsWith('whpl_')) {
      await fetch('/auth/logout', { method: 'POST', headers: { authorization: `Bearer ${token}` } }).catch(() => undefined);
    }
    signedOut('');
  });

  async function start() {
    try {
      me = await api('/webhooks/portal/session');
    } catch (err) {
      if (err instanceof SignedOut) return signedOut(err.message);
      return signedOut(err.message);
    }
    $('sign-in').hidden = true;
    $('link-ended').hidden = true;
    $('app').hidden = false;
    $('sign-out').hidden = false;
    $('sign-out').textContent = me.via === 'link' ? 'Leave' : 'Sign out';
    $('who').textContent =
      me.via === 'link'
        ? `${me.host.name}'s endpoints · link, ${me.access === 'full' ? 'full access' : 'read only'}, until ${when(me.expiresAt)}`
        : me.host.name;
    document.body.classList.toggle('read-only', me.access !== 'full');
    $('nav-links').hidden = me.via !== 'session';
    fillTypes();
    route();
  }

  // ---------------------------------------------------------------- routing

  let view = null; // { name, id, deliveryId }
  let pending = {};
  let timer = null;
  function stopPolling() {
    clearTimeout(timer);
    timer = null;
  }
  function poll() {
    stopPolling();
    timer = setTimeout(async () => {
      await refresh(false);
      if (me) poll();
    }, REFRESH_MS);
  }

  function parseHash() {
    const h = location.hash.replace(/^#/, '');
    let m = /^\/endpoints\/([0-9a-f-]{36})(?:\/deliveries\/([0-9a-f-]{36}))?$/i.exec(h);
    if (m) return { name: 'endpoint', id: m[1], deliveryId: m[2] || null };
    if (h === '/links') return { name: 'links' };
    return { name: 'list' };
  }

  function route() {
    if (!me) return;
    const next = parseHash();
    if (next.name === 'links' && me.via !== 'session') return void (location.hash = '#/');
    const changedView = !view || view.name !== next.name || view.id !== next.id;
    if (changedView) {
      forgetSecret();
      hideForms();
      say('');
      $('error').hidden = true;
      delivered = null;
      deliveryPages = 1;
      // What the action that changed the view has to say (a new endpoint's secret, a deletion).
      if (pending.secret) showSecret(pending.secret, pending.overlap);
      if (pending.outcome) say(pending.outcome);
      pending = {};
    }
    view = next;
    // A view that is new stays hidden until its data is there: nothing half-drawn, nothing stale.
    for (const name of ['list', 'endpoint', 'links']) if (changedView || name !== view.name) $(`view-${name}`).hidden = true;
    $('nav-endpoints').setAttribute('aria-current', view.name === 'links' ? 'false' : 'page');
    $('nav-links').setAttribute('aria-current', view.name === 'links' ? 'page' : 'false');
    void refresh(changedView).then(() => {
      if (changedView) focusHeading();
    });
    poll();
  }
  window.addEventListener('hashchange', route);

  function focusHeading() {
    if (!view) return; // not found: the error is what there is to read
    const id = { list: 'list-title', endpoint: 'ep-title', links: 'links-title' }[view.name];
    $(id).focus();
  }

  async function refresh(first) {
    if (!view) return;
    try {
      setStatus(first ? 'Loading…' : '');
      if (view.name === 'list') await showList();
      else if (view.name === 'endpoint') await showEndpoint();
      else if (view.name === 'links') await showLinks();
      $(`view-${view.name}`).hidden = false;
      setStatus(`Updated ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      if (err instanceof SignedOut) return signedOut(err.message);
      if (err.status === 404) {
        stopPolling();
        view = null; // whatever comes next is a new view
        for (const name of ['list', 'endpoint', 'links']) $(`view-${name}`).hidden = true;
        $('error').textContent = 'Not found: there is no such endpoint or delivery among yours.';
        $('error').hidden = false;
        setStatus('');
        return;
      }
      fail(err);
    }
  }

  /** Replaces a container's children, keeping the focus on the element with the same data-key. */
  function replaceKeepingFocus(container, nodes) {
    const focused = document.activeElement && container.contains(document.activeElement) ? document.activeElement.dataset.key : null;
    container.replaceChildren(...nodes);
    if (focused) {
      const again = container.querySelector(`[data-key="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  // ---------------------------------------------------------------- the list

  function fillTypes() {
    const subscribable = me.eventTypes.filter((t) => t !== 'webhook.test');
    for (const id of ['create-types', 'edit-types']) {
      const box = $(id);
      box.querySelectorAll('label').forEach((l) => l.remove());
      for (const t of subscribable) {
        box.append(el('label', { class: 'inline' }, el('input', { type: 'checkbox', value: t, checked: true }), ` ${t}`));
      }
    }
    const select = $('f-type');
    select.replaceChildren(el('option', { value: '', text: 'any' }), ...me.eventTypes.map((t) => el('option', { value: t, text: t })));
  }
  // What was typed, as a number: the API names anything it refuses (a fraction, 0, over 1000).
  const rateOf = (id) => Number($(id).value);
  const checkedTypes = (id) => [...$(id).querySelectorAll('input:checked')].map((i) => i.value);

  async function showList() {
    const [list, activity] = await Promise.all([api('/webhooks/endpoints?limit=100'), api('/webhooks/endpoint-activity')]);
    const byId = new Map(activity.items.map((a) => [a.endpointId, a]));
    $('endpoints-empty').hidden = list.items.length > 0;
    replaceKeepingFocus(
      $('endpoints'),
      list.items.map((e) => endpointCard(e, byId.get(e.id))),
    );
  }

  function stateText(e) {
    if (!e.enabled) return e.disabledReason ? `disabled: ${e.disabledReason}` : 'disabled by a person';
    if (e.health.state === 'failing') return `failing since ${when(e.health.failingSince)}`;
    return e.health.state;
  }

  function endpointCard(e, a) {
    const facts = el('dl', { class: 'facts' });
    const fact = (k, v, cls) => facts.append(el('dt', { text: k }), el('dd', { text: v, class: cls }));
    fact('State', stateText(e), `state-${e.enabled ? e.health.state : 'disabled'}`);
    fact('Rate limit', e.rateLimitPerSecond ? `${e.rateLimitPerSecond} per second` : 'no limit');
    if (a) {
      fact('Success, last hour', rate(a.lastHour));
      fact('Success, last day', rate(a.lastDay));
    }
    fact('Last success', e.health.lastSuccessAt ? `${when(e.health.lastSuccessAt)} (${ago(e.health.lastSuccessAt)})` : '—');
    if (a && a.lastFailure) {
      const f = a.lastFailure;
      fact('Last failure', `${when(f.at)}: ${inert(answerOf(f), 200)}${f.responseBody ? ` — ${inert(f.responseBody, 120)}` : ''}`);
    } else fact('Last failure', '—');
    fact('In flight', String(a ? a.inFlight : 0));
    fact('Waiting', e.health.pendingDeliveries ? `${e.health.pendingDeliveries} (oldest ${ago(e.health.oldestPendingAt)})` : '0');
    fact('Failed for good', String(e.health.failedDeliveries));
    return el(
      'article',
      { class: `card ${e.enabled ? e.health.state : 'disabled'}`, 'aria-label': e.url },
      el('h3', {}, el('a', { href: `#/endpoints/${e.id}`, text: e.url, 'data-key': e.id })),
      el('p', { class: 'muted', text: `${e.eventTypes.join(', ')}${e.description ? ` · ${e.description}` : ''}` }),
      facts,
    );
  }

  $('new-endpoint').addEventListener('click', () => {
    $('create-form').hidden = false;
    $('create-error').textContent = '';
    $('create-url').focus();
  });
  $('create-cancel').addEventListener('click', () => {
    $('create-form').hidden = true;
    $('new-endpoint').focus();
  });
  $('create-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    $('create-error').textContent = '';
    const body = { url: $('create-url').value, eventTypes: checkedTypes('create-types') };
    if ($('create-description').value) body.description = $('create-description').value;
    if ($('create-rate').value) body.rateLimitPerSecond = rateOf('create-rate');
    try {
      const created = await api('/webhooks/endpoints', { method: 'POST', body });
      $('create-form').reset();
      $('create-form').hidden = true;
      pending = {
        secret: created.secret,
        overlap: "This is the endpoint's first secret: nothing else signs beside it.",
        outcome: `Created ${created.url}. It receives ${created.eventTypes.join(' and ')} from now on.`,
      };
      location.hash = `#/endpoints/${created.id}`;
    } catch (err) {
      if (err instanceof SignedOut) return signedOut(err.message);
      $('create-error').textContent = problemText(err);
      $('create-url').focus();
    }
  });

  // ---------------------------------------------------------------- one endpoint

  let current = null; // the endpoint shown
  let delivered = null; // the delivery shown
  let deliveryPages = 1;

  async function showEndpoint() {
    const [e, activity] = await Promise.all([api(`/webhooks/endpoints/${view.id}`), api('/webhooks/endpoint-activity')]);
    current = e;
    const a = activity.items.find((x) => x.endpointId === e.id);
    $('ep-title').textContent = e.url;
    $('ep-description').textContent = `${e.eventTypes.join(', ')}${e.description ? ` · ${e.description}` : ''}`;
    const card = endpointCard(e, a);
    $('ep-health').replaceChildren(...card.querySelector('dl').childNodes);
    $('act-toggle').textContent = e.enabled ? 'Disable…' : 'Enable…';
    $('act-test').disabled = !e.enabled;
    renderSnippet();
    await showDeliveries();
    if (view.deliveryId) await showDelivery(view.deliveryId);
    else $('delivery').hidden = true;
  }

  function deliveryQuery() {
    const q = new URLSearchParams({ limit: String(Math.min(100, PAGE * deliveryPages)) });
    if ($('f-status').value) q.set('status', $('f-status').value);
    if ($('f-type').value) q.set('eventType', $('f-type').value);
    const since = fromLocalInput($('f-since').value);
    const until = fromLocalInput($('f-until').value);
    if (since) q.set('since', since);
    if (until) q.set('until', until);
    return q;
  }

  async function showDeliveries() {
    const page = await api(`/webhooks/endpoints/${view.id}/deliveries?${deliveryQuery()}`);
    $('deliveries-empty').hidden = page.items.length > 0;
    $('deliveries-more').hidden = !page.nextCursor || deliveryPages * PAGE >= 100;
    replaceKeepingFocus(
      $('deliveries').tBodies[0],
      page.items.map((d) => {
        const last = d.attempts.at(-1);
        return el(
          'tr',
          { class: `status-${d.status}`, 'data-delivery': d.id },
          el('td', { text: when(d.createdAt) }),
          el('td', { text: d.eventType }),
          el('td', { text: d.status + (d.status === 'pending' && d.nextAttemptAt ? `, next ${when(d.nextAttemptAt)}` : '') }),
          el('td', { class: 'num', text: String(d.attempts.length) }),
          el('td', { text: last ? `${inert(answerOf(last), 120)} · ${last.durationMs} ms` : '—' }),
          el(
            'td',
            {},
            el('a', {
              href: `#/endpoints/${view.id}/deliveries/${d.id}`,
              text: 'Details',
              'data-key': `details-${d.id}`,
              'aria-label': `Details of the ${d.eventType} delivery of ${when(d.createdAt)}`,
            }),
          ),
        );
      }),
    );
  }

  $('filters').addEventListener('submit', (event) => {
    event.preventDefault();
    deliveryPages = 1;
    void refresh(false);
  });
  $('deliveries-more').addEventListener('click', () => {
    deliveryPages += 1;
    void refresh(false);
  });

  // What one attempt sent (its signature, as the receiver got it) and the headers that came back,
  // as the server kept them (32 at most, values cut at 1 KiB): inert text, each value cut again here.
  function attemptHeaders(a) {
    if (!a.requestHeaders && !a.responseHeaders) return [el('p', { class: 'label', text: 'Headers: not recorded for this attempt' })];
    const sent = Object.entries(a.requestHeaders ?? {}).map(([k, v]) => `${k}: ${inert(v, 300)}`);
    const got = (a.responseHeaders ?? []).map(
      (h) => `${inert(h.name, 128)}: ${inert(h.value)}${h.omittedBytes ? ` … ${h.omittedBytes} more bytes not kept` : ''}`,
    );
    if (a.responseHeadersOmitted) got.push(`… ${a.responseHeadersOmitted} more headers not kept`);
    return [
      el('p', { class: 'label', text: 'Request headers (signed, as the receiver got them)' }),
      el('pre', { class: 'code request-headers', text: sent.join('\n') || '(none)' }),
      el('p', { class: 'label', text: 'Response headers' }),
      el('pre', { class: 'code response-headers', text: a.responseHeaders === null ? '(no answer)' : got.join('\n') || '(none)' }),
    ];
  }

  async function showDelivery(id) {
    const d = await api(`/webhooks/deliveries/${id}`);
    const firstShow = !delivered || delivered.id !== d.id;
    delivered = d;
    $('delivery').hidden = false;
    $('delivery-title').textContent = `Delivery ${d.id} · ${d.eventType} · ${d.status}`;
    const headers = Object.entries(d.request.headers).map(([k, v]) => `${k}: ${v}`);
    $('delivery-request-headers').textContent = `POST ${d.request.url}\n${headers.join('\n')}`;
    $('delivery-request-body').textContent = inert(d.request.body, 8192);
    const items = d.attempts.map((a, i) => {
      const facts = el('dl', { class: 'facts' });
      const fact = (k, v) => facts.append(el('dt', { text: k }), el('dd', { text: v }));
      fact('At', when(a.at));
      fact('Status', a.responseStatus === null ? 'no answer' : String(a.responseStatus));
      fact('Time taken', `${a.durationMs} ms`);
      fact('Error', a.error ? inert(a.error, 500) : '—');
      if (a.traceId) fact('Trace', a.traceId);
      return el(
        'li',
        { class: a.responseStatus !== null && a.responseStatus >= 200 && a.responseStatus < 300 ? 'ok' : 'bad', 'data-attempt': String(i) },
        facts,
        ...attemptHeaders(a),
        el('p', { class: 'label', text: 'Response body (first 1 KiB, as text)' }),
        el('pre', { class: 'code response-body', text: a.responseBody === null ? '(none)' : inert(a.responseBody) }),
      );
    });
    $('attempts').replaceChildren(...items);
    if (!items.length)
      $('attempts').replaceChildren(el('li', { class: 'muted', text: 'No attempt yet: the sender picks it up within seconds.' }));
    $('delivery-retry').disabled = d.status === 'pending' && d.attempts.length === 0;
    renderSnippet();
    if (firstShow) $('delivery-title').focus();
  }

  $('delivery-close').addEventListener('click', () => {
    delivered = null;
    location.hash = `#/endpoints/${view.id}`;
  });

  // ---------------------------------------------------------------- actions: say, confirm, do, say

  let returnFocus = null;
  function hideForms() {
    $('confirm').hidden = true;
    $('edit-form').hidden = true;
    $('create-form').hidden = true;
  }

  /** Says what an action will do; on confirmation does it and says what it did. */
  function confirmAction({ title, text, go, fields = [], run, opener }) {
    hideForms();
    returnFocus = opener;
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-fields').replaceChildren(...fields);
    $('confirm-go').textContent = go;
    $('confirm-go').onclick = async () => {
      $('confirm-go').disabled = true;
      try {
        const said = await run();
        $('confirm').hidden = true;
        if (said === null) return; // it moved to another view, which says what was done
        say(said);
        await refresh(false);
        (returnFocus && document.body.contains(returnFocus) && !returnFocus.closest('[hidden]') ? returnFocus : $('outcome')).focus();
      } catch (err) {
        fail(err);
      } finally {
        $('confirm-go').disabled = false;
      }
    };
    $('confirm').hidden = false;
    (fields.length ? fields[0].querySelector('input, select') : $('confirm-go')).focus();
  }
  $('confirm-cancel').addEventListener('click', () => {
    $('confirm').hidden = true;
    if (returnFocus) returnFocus.focus();
  });

  $('act-test').addEventListener('click', (event) => {
    const select = el('select', { id: 'test-type' }, ...me.eventTypes.map((t) => el('option', { value: t, text: t })));
    confirmAction({
      opener: event.currentTarget,
      title: 'Send a test event',
      text: `Sends one event of the type you choose to ${current.url} now, signed with the current secret. A booking type sends a sample booking marked "test": true. It appears in the deliveries below as it is attempted.`,
      fields: [el('label', {}, 'Event type ', select)],
      go: 'Send it',
      run: async () => {
        const d = await api(`/webhooks/endpoints/${current.id}/test`, { method: 'POST', body: { eventType: select.value } });
        return `Sent: a ${d.eventType} delivery (${d.id}) is queued now; its attempts appear below.`;
      },
    });
  });

  $('act-recover').addEventListener('click', (event) => {
    const input = el('input', { id: 'recover-since', type: 'datetime-local', required: true });
    input.value = toLocalInput(new Date(Date.now() - 24 * 3_600_000));
    confirmAction({
      opener: event.currentTarget,
      title: 'Retry failed deliveries since a time',
      text: `Sends again every delivery to ${current.url} that failed for good and was created since the time below, and sends every event since then that this endpoint never had (of the types it receives).`,
      fields: [el('label', {}, 'Since ', input)],
      go: 'Retry them',
      run: async () => {
        const since = fromLocalInput(input.value);
        const r = await api(`/webhooks/endpoints/${current.id}/recover`, { method: 'POST', body: { since } });
        return `Done: ${r.requeued} failed ${r.requeued === 1 ? 'delivery' : 'deliveries'} sent again, and ${r.created} ${r.created === 1 ? 'event' : 'events'} it never had on ${r.created === 1 ? 'its' : 'their'} way.`;
      },
    });
  });

  $('act-toggle').addEventListener('click', (event) => {
    const enabling = !current.enabled;
    confirmAction({
      opener: event.currentTarget,
      title: enabling ? 'Enable the endpoint' : 'Disable the endpoint',
      text: enabling
        ? `Resumes sending to ${current.url}: the deliveries it had waiting go out. Events that happened while it was disabled are not sent: use "Retry failed since…" for them.`
        : `Stops sending to ${current.url}. Deliveries waiting for it wait; events that happen while it is disabled are not sent to it (after enabling, "Retry failed since…" sends them).`,
      go: enabling ? 'Enable' : 'Disable',
      run: async () => {
        await api(`/webhooks/endpoints/${current.id}`, { method: 'PATCH', body: { enabled: enabling } });
        return enabling
          ? `Enabled: ${current.url} receives events again.`
          : `Disabled: nothing is sent to ${current.url} until it is enabled.`;
      },
    });
  });

  $('act-rotate').addEventListener('click', (event) => {
    const hours = me.secretOverlapHours;
    confirmAction({
      opener: event.currentTarget,
      title: 'Rotate the signing secret',
      text: `Makes a new signing secret for ${current.url}, shown once. The current secret keeps signing beside it for ${hours} hours, so every request carries both signatures until your receiver has the new one.`,
      go: 'Rotate',
      run: async () => {
        const r = await api(`/webhooks/endpoints/${current.id}/rotate-secret`, { method: 'POST' });
        const until = new Date(Date.now() + hours * 3_600_000);
        showSecret(r.secret, `The old secret keeps signing beside this one for ${hours} hours, until about ${when(until.toISOString())}.`);
        return `Rotated: requests to ${current.url} now carry a signature with the new secret, and with the old one until about ${when(until.toISOString())}.`;
      },
    });
  });

  $('act-delete').addEventListener('click', (event) => {
    const n = current.health.pendingDeliveries;
    confirmAction({
      opener: event.currentTarget,
      title: 'Delete the endpoint',
      text: `Deletes ${current.url} and all its deliveries and their attempts${n ? `, ${n} of them still waiting to be sent` : ''}. This cannot be undone.`,
      go: 'Delete it',
      run: async () => {
        const url = current.url;
        await api(`/webhooks/endpoints/${current.id}`, { method: 'DELETE' });
        pending = { outcome: `Deleted ${url} and its deliveries.` };
        location.hash = '#/';
        return null;
      },
    });
  });

  $('delivery-retry').addEventListener('click', (event) => {
    const d = delivered;
    confirmAction({
      opener: event.currentTarget,
      title: 'Retry this delivery',
      text: `Sends the ${d.eventType} delivery ${d.id} to ${current.url} again now: a new round of attempts, with the same webhook-id. Its history stays.`,
      go: 'Retry it',
      run: async () => {
        await api(`/webhooks/deliveries/${d.id}/retry`, { method: 'POST' });
        return `Queued: delivery ${d.id} is being sent again; its new attempts appear below.`;
      },
    });
  });

  $('act-edit').addEventListener('click', () => {
    hideForms();
    $('edit-url').value = current.url;
    $('edit-description').value = current.description;
    $('edit-rate').value = current.rateLimitPerSecond ?? '';
    for (const box of $('edit-types').querySelectorAll('input')) box.checked = current.eventTypes.includes(box.value);
    $('edit-error').textContent = '';
    $('edit-form').hidden = false;
    $('edit-url').focus();
  });
  $('edit-cancel').addEventListener('click', () => {
    $('edit-form').hidden = true;
    $('act-edit').focus();
  });
  $('edit-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = {
      eventTypes: checkedTypes('edit-types'),
      description: $('edit-description').value,
      rateLimitPerSecond: $('edit-rate').value ? rateOf('edit-rate') : null,
    };
    if ($('edit-url').value !== current.url) body.url = $('edit-url').value;
    try {
      const e = await api(`/webhooks/endpoints/${current.id}`, { method: 'PATCH', body });
      $('edit-form').hidden = true;
      say(`Saved: ${e.url} receives ${e.eventTypes.join(' and ')}.`);
      await refresh(false);
      $('act-edit').focus();
    } catch (err) {
      if (err instanceof SignedOut) return signedOut(err.message);
      $('edit-error').textContent = problemText(err);
    }
  });

  // ---------------------------------------------------------------- the secret, once

  function showSecret(secret, overlap) {
    $('secret-value').textContent = secret;
    $('secret-overlap').textContent = overlap;
    $('secret-panel').hidden = false;
    $('secret-copy').focus();
  }
  /** The secret leaves the page: its one showing is over. */
  function forgetSecret() {
    $('secret-value').textContent = '';
    $('secret-overlap').textContent = '';
    $('secret-panel').hidden = true;
  }
  $('secret-copy').addEventListener('click', () => copy($('secret-value').textContent, $('secret-copy')));
  $('secret-done').addEventListener('click', () => {
    forgetSecret();
    $('ep-title').focus();
  });

  async function copy(text, button) {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch {
      // No clipboard (an insecure origin, or refused): select the text for Ctrl+C instead.
      const range = document.createRange();
      range.selectNodeContents(button.previousElementSibling || button);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      button.textContent = 'Selected: press Ctrl+C';
    }
    setTimeout(() => (button.textContent = button.id === 'snippet-copy' ? 'Copy code' : 'Copy'), 2000);
  }

  // ---------------------------------------------------------------- verification snippets

  // Standard Webhooks: v1,base64(HMAC-SHA256(base64-decoded secret, "<id>.<timestamp>.<raw body>")),
  // several space-separated while a rotated secret overlaps; a timestamp more than 5 minutes off is refused.
  const SNIPPETS = {
    node: (id) => `// verify.mjs — Node 18+, no package.  node verify.mjs < body.json
import { createHmac, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';

const secret = process.env.STAYHUB_WEBHOOK_SECRET; // whsec_…, from your configuration
const id = process.env.WEBHOOK_ID ?? '${id}';       // the webhook-id header
const timestamp = process.env.WEBHOOK_TIMESTAMP;     // the webhook-timestamp header
const signatures = process.env.WEBHOOK_SIGNATURE;    // the webhook-signature header
const body = readFileSync(0);                        // the raw body, byte for byte

const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
const expected = createHmac('sha256', key).update(\`\${id}.\${timestamp}.\`).update(body).digest();
const matches = signatures.split(' ').some((s) => {
  const [version, sig] = s.split(',');
  const got = Buffer.from(sig ?? '', 'base64');
  return version === 'v1' && got.length === expected.length && timingSafeEqual(got, expected);
});
const fresh = Math.abs(Date.now() / 1000 - Number(timestamp)) <= 300;
console.log(matches && fresh ? 'signature verified' : matches ? 'stale timestamp' : 'signature does not match');
process.exit(matches && fresh ? 0 : 1);
`,
    python: (id) => `# verify.py — Python 3.9+, no package.  python3 verify.py < body.json
import base64, hashlib, hmac, os, sys, time

secret = os.environ["STAYHUB_WEBHOOK_SECRET"]          # whsec_…, from your configuration
msg_id = os.environ.get("WEBHOOK_ID", "${id}")   # the webhook-id header
timestamp = os.environ["WEBHOOK_TIMESTAMP"]             # the webhook-timestamp header
signatures = os.environ["WEBHOOK_SIGNATURE"]            # the webhook-signature header
body = sys.stdin.buffer.read()                          # the raw body, byte for byte

key = base64.b64decode(secret.removeprefix("whsec_"))
expected = base64.b64encode(hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()).decode()
matches = any(hmac.compare_digest(s[3:], expected) for s in signatures.split() if s.startswith("v1,"))
fresh = abs(time.time() - int(timestamp)) <= 300
print("signature verified" if matches and fresh else "stale timestamp" if matches else "signature does not match")
sys.exit(0 if matches and fresh else 1)
`,
    go: (id) => `// verify.go — Go, standard library.  go run verify.go < body.json
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(os.Getenv("STAYHUB_WEBHOOK_SECRET"), "whsec_"))
	id := os.Getenv("WEBHOOK_ID") // ${id}
	timestamp := os.Getenv("WEBHOOK_TIMESTAMP")
	body, _ := io.ReadAll(os.Stdin) // the raw body, byte for byte

	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	expected := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))

	ts, _ := strconv.ParseInt(timestamp, 10, 64)
	fresh := math.Abs(float64(time.Now().Unix()-ts)) <= 300
	for _, s := range strings.Fields(os.Getenv("WEBHOOK_SIGNATURE")) {
		if hmac.Equal([]byte(s), []byte(expected)) && fresh {
			fmt.Println("signature verified")
			return
		}
	}
	fmt.Println("signature does not match (or stale timestamp)")
	os.Exit(1)
}
`,
    shell: (id) => `#!/bin/sh
# verify.sh — openssl and curl.  sh verify.sh < body.json   (REPLAY_TO=<url> also sends it there)
WEBHOOK_ID=\${WEBHOOK_ID:-${id}}
BODY=$(mktemp) && cat > "$BODY"   # the raw body, byte for byte
KEY_HEX=$(printf %s "\${STAYHUB_WEBHOOK_SECRET#whsec_}" | base64 -d | od -An -vtx1 | tr -d ' \\n')
EXPECTED="v1,$( { printf '%s.%s.' "$WEBHOOK_ID" "$WEBHOOK_TIMESTAMP"; cat "$BODY"; } \\
  | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$KEY_HEX" -binary | base64)"
AGE=$(( $(date +%s) - WEBHOOK_TIMESTAMP ))
case " $WEBHOOK_SIGNATURE " in
  *" $EXPECTED "*) if [ "\${AGE#-}" -le 300 ]; then RESULT="signature verified"; else RESULT="stale timestamp"; fi ;;
  *) RESULT="signature does not match" ;;
esac
echo "$RESULT"

# Replay it, headers and body unchanged, to a receiver of yours (a local one, to test it):
if [ -n "\${REPLAY_TO:-}" ]; then
  curl -sS -o /dev/null -w 'replayed: HTTP %{http_code}\\n' -X POST "$REPLAY_TO" -H 'content-type: application/json' \\
    -H "webhook-id: $WEBHOOK_ID" -H "webhook-timestamp: $WEBHOOK_TIMESTAMP" \\
    -H "webhook-signature: $WEBHOOK_SIGNATURE" --data-binary @"$BODY"
fi
rm -f "$BODY"
[ "$RESULT" = "signature verified" ]
`,
  };

  function renderSnippet() {
    const id = delivered ? delivered.id : 'msg_…';
    $('snippet').textContent = SNIPPETS[$('snippet-lang').value](id);
  }
  $('snippet-lang').addEventListener('change', renderSnippet);
  $('snippet-copy').addEventListener('click', () => copy($('snippet').textContent, $('snippet-copy')));

  // ---------------------------------------------------------------- links for developers

  async function showLinks() {
    const list = await api('/webhooks/portal-links');
    replaceKeepingFocus(
      $('links').tBodies[0],
      list.items.map((l) =>
        el(
          'tr',
          { class: `link-${l.state}`, 'data-link': l.id },
          el('td', { text: l.label || '—' }),
          el('td', { text: l.access === 'full' ? 'full' : 'read only' }),
          el('td', { text: l.state }),
          el('td', { text: when(l.revokedAt || l.expiresAt) }),
          el('td', { class: 'num', text: String(l.uses) }),
          el(
            'td',
            { class: 'buttons' },
            el('button', { type: 'button', class: 'secondary', text: 'Uses', 'data-key': `uses-${l.id}`, onclick: () => showUses(l) }),
            l.state === 'live'
              ? el('button', {
                  type: 'button',
                  class: 'danger',
                  text: 'Revoke…',
                  'data-key': `revoke-${l.id}`,
                  'aria-label': `Revoke the link for ${l.label || 'no one named'}`,
                  onclick: (event) => revokeLink(l, event.currentTarget),
                })
              : null,
          ),
        ),
      ),
    );
  }

  async function showUses(l) {
    try {
      const uses = await api(`/webhooks/portal-links/${l.id}/uses`);
      $('uses-title').textContent = `Uses of the link for ${l.label || '(no name)'}`;
      $('uses-table').tBodies[0].replaceChildren(
        ...uses.items.map((u) =>
          el(
            'tr',
            {},
            el('td', { text: when(u.at) }),
            el('td', { text: `${u.method} ${u.route}${u.target ? ` (${u.target})` : ''}` }),
            el('td', { class: 'num', text: String(u.statusCode) }),
            el('td', { text: `${u.ip} · ${inert(u.userAgent, 80)}` }),
          ),
        ),
      );
      $('uses').hidden = false;
      $('uses-title').focus();
    } catch (err) {
      fail(err);
    }
  }

  function revokeLink(l, opener) {
    if (!window.confirm(`Revoke the link${l.label ? ` for ${l.label}` : ''}? It stops working at once; its record of uses stays.`)) {
      opener.focus();
      return;
    }
    api(`/webhooks/portal-links/${l.id}`, { method: 'DELETE' })
      .then(async () => {
        say(`Revoked: the link${l.label ? ` for ${l.label}` : ''} no longer opens the portal.`);
        await refresh(false);
        $('links-title').focus();
      })
      .catch(fail);
  }

  $('link-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    $('link-error').textContent = '';
    const access = $('link-form').querySelector('input[name="access"]:checked').value;
    const body = { access, expiresInMinutes: Number($('link-minutes').value) };
    if ($('link-label').value) body.label = $('link-label').value;
    try {
      const made = await api('/webhooks/portal-links', { method: 'POST', body });
      $('link-made-url').textContent = made.url;
      $('link-made-until').textContent = when(made.expiresAt);
      $('link-made').hidden = false;
      $('link-made-copy').focus();
      await refresh(false);
    } catch (err) {
      if (err instanceof SignedOut) return signedOut(err.message);
      $('link-error').textContent = problemText(err);
    }
  });
  $('link-made-copy').addEventListener('click', () => copy($('link-made-url').textContent, $('link-made-copy')));
  $('link-made-done').addEventListener('click', () => {
    $('link-made-url').textContent = '';
    $('link-made').hidden = true;
    $('link-form').reset();
    $('link-label').focus();
  });

  // ---------------------------------------------------------------- start

  takeLinkFromUrl();
  if (sessionStorage.getItem(TOKEN_KEY)) void start();
  else signedOut('');
})();
