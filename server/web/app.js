// tokenkv's page: a chat over /v1/chat/completions (streamed) and a live view
// of the cache's prefix tree (/v1/cache). Plain browser JavaScript, served
// from the binary itself; it loads nothing from anywhere else.
'use strict';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'tokenkv-api-key';
const POLL_MS = 1000;
const ROW = 22; // px per leaf row of the tree
const SVG_NS = 'http://www.w3.org/2000/svg';

const state = {
  history: [],        // the conversation: {role, content}
  busy: null,         // the AbortController of the reply being streamed
  convTokens: [],     // the conversation's tokens, as its next turn's prompt starts
  cache: null,        // the last /v1/cache answer
  selected: null,     // the node id whose text is shown
  pollTimer: null,
  needKey: false,
};

class KeyNeeded extends Error {}

// ---- the API -------------------------------------------------------------------

function authHeaders() {
  const k = sessionStorage.getItem(KEY_STORE);
  return k ? { Authorization: `Bearer ${k}` } : {};
}

async function api(path, { body, signal } = {}) {
  const headers = { ...authHeaders() };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method: body === undefined ? 'GET' : 'POST',
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (res.status === 401) {
    askKey(sessionStorage.getItem(KEY_STORE) ? 'the server refused this key' : '');
    throw new KeyNeeded('an API key is needed');
  }
  return res;
}

// The OpenAI-style error message of a failed response, or its status.
async function failure(res) {
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) return `${res.status}: ${j.error.message}`;
  } catch { /* not JSON */ }
  return `HTTP ${res.status}`;
}

async function apiJSON(path, body) {
  const res = await api(path, { body });
  if (!res.ok) throw new Error(await failure(res));
  return res.json();
}

// The events of a Server-Sent Events body, parsed as JSON, until [DONE].
async function* sseEvents(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      yield JSON.parse(data);
    }
  }
}

function setStatus(text, isError = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', isError);
}

// ---- the key ---------------------------------------------------------------------

function askKey(why) {
  state.needKey = true;
  $('key-form').hidden = false;
  $('key-error').textContent = why || '';
  if (document.activeElement !== $('key-input')) $('key-input').focus();
}

$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const k = $('key-input').value.trim();
  if (!k) return;
  sessionStorage.setItem(KEY_STORE, k);
  $('key-input').value = '';
  $('key-form').hidden = true;
  state.needKey = false;
  start();
});

// ---- chat ------------------------------------------------------------------------

function requestMessages() {
  const sys = $('system-prompt').value.trim();
  return sys ? [{ role: 'system', content: sys }, ...state.history] : [...state.history];
}

function addMessage(role, text) {
  const box = document.createElement('div');
  box.className = `msg ${role}`;
  const body = document.createElement('div');
  body.className = 'text';
  body.textContent = text;
  if (role === 'assistant') body.dataset.testid = 'reply';
  box.append(body);
  $('messages').append(box);
  box.scrollIntoView({ block: 'end' });
  return box;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

function numberInput(id, fallback) {
  const v = Number($(id).value);
  return $(id).value !== '' && Number.isFinite(v) ? v : fallback;
}

async function send() {
  const text = $('prompt').value;
  if (!text.trim() || state.busy) return;
  $('prompt').value = '';
  state.history.push({ role: 'user', content: text });
  addMessage('user', text);
  const box = addMessage('assistant', '');
  const textEl = box.querySelector('.text');
  const usageEl = document.createElement('div');
  usageEl.className = 'usage';
  usageEl.textContent = '…';
  box.append(usageEl);

  const ac = new AbortController();
  state.busy = ac;
  setBusy(true);
  pollSoon();
  const body = {
    messages: requestMessages(),
    stream: true,
    stream_options: { include_usage: true },
    temperature: numberInput('temperature', 0.7),
    max_tokens: Math.max(1, Math.round(numberInput('max-tokens', 256))),
  };
  const t0 = performance.now();
  let reply = '';
  let ttft = null;
  let usage = null;
  let finish = null;
  let outcome = 'done';
  try {
    const res = await api('/v1/chat/completions', { body, signal: ac.signal });
    if (!res.ok) throw new Error(await failure(res));
    for await (const ev of sseEvents(res.body)) {
      if (ev.error) throw new Error(ev.error.message);
      const choice = ev.choices && ev.choices[0];
      const delta = choice && choice.delta;
      if (delta && (delta.content || delta.reasoning_content)) {
        if (ttft === null) ttft = performance.now() - t0;
        if (delta.content) {
          reply += delta.content;
          textEl.textContent = reply;
          textEl.scrollIntoView({ block: 'end' });
        }
      }
      if (choice && choice.finish_reason) finish = choice.finish_reason;
      if (ev.usage) usage = ev.usage;
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      outcome = 'stopped';
    } else {
      outcome = 'failed';
      usageEl.textContent = e.message;
    }
  } finally {
    state.busy = null;
    setBusy(false);
  }
  state.history.push({ role: 'assistant', content: reply });
  box.classList.toggle('stopped', outcome === 'stopped');
  box.classList.toggle('failed', outcome === 'failed');
  if (outcome !== 'failed') usageEl.textContent = usageLine(usage, ttft, performance.now() - t0, finish);
  if (usage) {
    const cached = (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens) || 0;
    $('cached-tokens').textContent = String(cached);
  }
  await updateConversationPath();
  pollSoon();
}

function usageLine(usage, ttft, total, finish) {
  const parts = [];
  if (usage) {
    const cached = (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens) || 0;
    parts.push(`prompt ${usage.prompt_tokens} tokens (${cached} cached)`, `reply ${usage.completion_tokens} tokens`);
  }
  if (ttft !== null) parts.push(`first token after ${ttft.toFixed(0)} ms`);
  parts.push(`${(total / 1000).toFixed(2)} s`);
  if (finish) parts.push(`finish: ${finish}`);
  return parts.join(' · ');
}

// The tokens the conversation so far renders to: the next turn's prompt
// begins with them, so the tree path that holds them is what it reuses.
async function updateConversationPath() {
  if (!state.history.length) {
    state.convTokens = [];
    renderTree();
    return;
  }
  try {
    const t = await apiJSON('/apply-template', { messages: requestMessages() });
    const k = await apiJSON('/tokenize', { content: t.prompt });
    state.convTokens = k.tokens;
  } catch (e) {
    state.convTokens = [];
    if (!(e instanceof KeyNeeded)) setStatus(`cannot find the conversation's path: ${e.message}`, true);
  }
  renderTree();
}

function newConversation() {
  if (state.busy) state.busy.abort();
  state.history = [];
  state.convTokens = [];
  $('messages').replaceChildren();
  $('cached-tokens').textContent = '0';
  renderTree();
  $('prompt').focus();
}

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  send();
});
$('prompt').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    send();
  }
});
$('stop').addEventListener('click', () => {
  if (state.busy) state.busy.abort(); // closing the connection cancels the request on the server
});
$('new-chat').addEventListener('click', newConversation);

// ---- the cache -------------------------------------------------------------------

function pollSoon() {
  clearTimeout(state.pollTimer);
  state.pollTimer = setTimeout(poll, 50);
}

async function poll() {
  clearTimeout(state.pollTimer);
  if (state.needKey) return;
  try {
    // the token ids find this conversation's nodes; with --api-key (a key in use) they are the admin
    // key's, and the tree is drawn without them
    const res = await api(sessionStorage.getItem(KEY_STORE) ? '/v1/cache' : '/v1/cache?tokens=1');
    if (!res.ok) throw new Error(await failure(res));
    state.cache = await res.json();
    showTotals(state.cache);
    renderTree();
    if (!state.busy) setStatus('');
  } catch (e) {
    if (e instanceof KeyNeeded) return;
    setStatus(`cache: ${e.message}`, true);
  }
  state.pollTimer = setTimeout(poll, POLL_MS);
}

function showTotals(c) {
  const reused = c.tokens_reused || 0;
  const computed = c.tokens_computed || 0;
  $('cells-used').textContent = String(c.cells.used);
  $('cells-free').textContent = String(c.cells.free);
  $('hit-rate').textContent = reused + computed ? `${((100 * reused) / (reused + computed)).toFixed(1)}%` : '–';
  $('evictions').textContent = String(c.evictions);
  $('nodes').textContent = String(c.nodes);
  $('running').textContent = String(c.sequences.length);
}

// The ids of the nodes that hold the conversation's tokens, root first (the
// last one may hold them only in part).
function conversationPath(roots, children) {
  const on = new Set();
  const t = state.convTokens;
  let at = 0;
  let level = roots;
  while (level && at < t.length) {
    const next = level.find((n) => n.token_ids && n.token_ids[0] === t[at]);
    if (!next) break;
    on.add(next.id);
    let k = 0;
    while (k < next.token_ids.length && at + k < t.length && next.token_ids[k] === t[at + k]) k++;
    if (k < next.token_ids.length) break;
    at += k;
    level = children.get(next.id);
  }
  return on;
}

function colourOf(n, maxUse, minUse, maxHits) {
  const by = $('colour-by').value;
  let r;
  if (by === 'hits') r = maxHits > 0 ? Math.log1p(n.hits) / Math.log1p(maxHits) : 0;
  else r = maxUse > minUse ? (n.last_use - minUse) / (maxUse - minUse) : 1;
  const hue = by === 'hits' ? 28 : 205;
  return `hsl(${hue}, ${25 + 55 * r}%, ${88 - 30 * r}%)`;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// An icicle: x is the position of a node's first token, width its tokens,
// and each leaf gets a row, so a shared prefix spans the rows of every
// conversation that continues it.
function renderTree() {
  const box = $('tree');
  const c = state.cache;
  const focusedId = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.node : undefined;
  if (!c || !c.tree.length) {
    const p = document.createElement('p');
    p.className = 'empty';
    p.textContent = 'The cache is empty: send a message.';
    box.replaceChildren(p);
    return;
  }
  const nodes = c.tree;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const children = new Map();
  const roots = [];
  for (const n of nodes) {
    if (n.parent === null || !byId.has(n.parent)) roots.push(n);
    else {
      if (!children.has(n.parent)) children.set(n.parent, []);
      children.get(n.parent).push(n);
    }
  }
  const leaves = new Map();
  const countLeaves = (n) => {
    const ch = children.get(n.id) || [];
    const k = ch.length ? ch.reduce((s, x) => s + countLeaves(x), 0) : 1;
    leaves.set(n.id, k);
    return k;
  };
  const rows = roots.reduce((s, r) => s + countLeaves(r), 0);
  const end = Math.max(...nodes.map((n) => n.depth + n.tokens), 1);
  const width = Math.max(box.clientWidth - 2, 240);
  const scale = width / end;
  let maxUse = -Infinity;
  let minUse = Infinity;
  let maxHits = 0;
  for (const n of nodes) {
    maxUse = Math.max(maxUse, n.last_use);
    minUse = Math.min(minUse, n.last_use);
    maxHits = Math.max(maxHits, n.hits);
  }
  const onPath = conversationPath(roots, children);
  const root = svg('svg', { width, height: rows * ROW, role: 'group' });

  const place = (n, row) => {
    const x = n.depth * scale;
    const w = Math.max(n.tokens * scale, 3);
    const h = leaves.get(n.id) * ROW;
    const g = svg('g', { tabindex: 0, role: 'button' });
    g.dataset.node = String(n.id);
    const flags = [n.refs > 0 ? 'in use' : '', n.pinned ? 'pinned' : '', onPath.has(n.id) ? 'this conversation' : '']
      .filter(Boolean).join(', ');
    const label = `node ${n.id}: ${n.tokens} tokens from position ${n.depth}, ${n.hits} hits${flags ? `, ${flags}` : ''}`;
    g.setAttribute('aria-label', label);
    const cls = ['node'];
    if (n.refs > 0) cls.push('in-use');
    if (n.pinned) cls.push('pinned');
    if (onPath.has(n.id)) cls.push('on-path');
    if (state.selected === n.id) cls.push('selected');
    const rect = svg('rect', { class: cls.join(' '), x: x + 0.5, y: row * ROW + 1, width: Math.max(w - 1, 2),
      height: h - 2, rx: 3, fill: colourOf(n, maxUse, minUse, maxHits) });
    const title = svg('title', {});
    title.textContent = label;
    g.append(rect, title);
    if (w > 44) {
      const t = svg('text', { x: x + 4, y: row * ROW + 15 });
      t.textContent = `${n.tokens} tok${n.hits ? ` · ${n.hits} hits` : ''}`;
      g.append(t);
    }
    g.addEventListener('click', () => selectNode(n.id));
    g.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        selectNode(n.id);
      }
    });
    root.append(g);
    let r = row;
    for (const ch of children.get(n.id) || []) {
      place(ch, r);
      r += leaves.get(ch.id);
    }
  };
  let row = 0;
  for (const r of roots) {
    place(r, row);
    row += leaves.get(r.id);
  }
  box.replaceChildren(root);
  if (focusedId !== undefined) {
    const again = root.querySelector(`g[data-node="${focusedId}"]`);
    if (again) again.focus();
  }
}

async function selectNode(id) {
  state.selected = id;
  renderTree();
  const out = $('node-detail');
  try {
    const c = await apiJSON('/v1/cache?detail=1');
    const n = c.tree.find((x) => x.id === id);
    if (!n) {
      out.replaceChildren(paragraph('That node is gone (evicted, or split by a newer request).'));
      return;
    }
    const head = paragraph(`node ${n.id}: tokens ${n.depth}–${n.depth + n.tokens - 1} (${n.tokens}), ` +
      `${n.hits} hits, ${n.refs} sequences use it, ${n.pins} pins`);
    const pre = document.createElement('pre');
    pre.textContent = (n.text ?? '') + (n.text_truncated ? ' …' : '');
    out.replaceChildren(head, pre);
  } catch (e) {
    if (!(e instanceof KeyNeeded)) out.replaceChildren(paragraph(e.message));
  }
}

function paragraph(text) {
  const p = document.createElement('p');
  p.textContent = text;
  return p;
}

$('colour-by').addEventListener('change', () => {
  $('legend-colour').textContent = $('colour-by').value;
  renderTree();
});
window.addEventListener('resize', () => renderTree());

// ---- start -----------------------------------------------------------------------

async function start() {
  try {
    const p = await apiJSON('/props');
    $('model').textContent = `${p.model_alias} · context ${p.n_ctx} tokens · ${p.total_slots} slots`;
    const limit = p.default_generation_settings && p.default_generation_settings.params
      ? p.default_generation_settings.params.n_predict : undefined;
    if (limit) {
      $('max-tokens').max = String(limit);
      if (Number($('max-tokens').value) > limit) $('max-tokens').value = String(limit);
    }
    setStatus('');
  } catch (e) {
    if (e instanceof KeyNeeded) return;
    setStatus(`cannot reach the server: ${e.message}`, true);
  }
  poll();
}

start();
