// The demo page: one reconnecting peer to ws://<this host>/rpc, six panels.
import { reconnecting, RpcError } from 'jsonrpc-peer';

/** @typedef {import('./demo-api.js').DemoPeer} DemoPeer the peer, typed by the server's rpc.discover */

// The page's elements are looked up by id; their types are not what is checked here.
/** @type {(id: string) => any} */
const $ = (id) => document.getElementById(id);

// The endpoint lives beside the page; `?ws=` overrides it when the page is served elsewhere.
const WS_URL =
  new URLSearchParams(location.search).get('ws') ??
  `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/rpc`;

// ---- connection ------------------------------------------------------------------

function setStatus(state, text) {
  const el = $('status');
  el.dataset.state = state;
  $('status-text').textContent = text;
  // While the link is down, calls wait for it (up to their timeout): buttons stay usable.
  for (const b of /** @type {NodeListOf<HTMLButtonElement>} */ (document.querySelectorAll('[data-needs-connection]'))) b.disabled = state === 'stopped';
}

// The module dials again by itself, with exponential backoff and full jitter; handlers
// registered here serve every connection. The close code of the last drop is shown: it is
// read from `closed` of the last connection that came up (a dial that fails keeps it).
/** @type {import('jsonrpc-peer').Peer | null} */
let lastUp = null;
// Typed by the API the server describes (demo-api.d.ts, generated from its rpc.discover):
// a call, handler or notification that does not match it fails `tsc --checkJs` in CI.
const peer = /** @type {DemoPeer} */ (/** @type {unknown} */ (reconnecting(WS_URL, {
  timeoutMs: 10000,
  onFrame: logFrame,
  backoff: { initialMs: 250, maxMs: 8000 },
  onConnect: (p) => {
    lastUp = p;
  },
})))
  .notification('metrics', onMetrics)
  .method('ui.describe', describeUi);

peer.addEventListener('statechange', (/** @type {any} */ { detail: s }) => {
  if (s.state === 'connected') setStatus('open', 'connected');
  else if (s.state === 'connecting') setStatus('connecting', s.attempt ? `reconnecting (attempt ${s.attempt + 1})…` : 'connecting…');
  else if (s.state === 'waiting') {
    const show = (why) => {
      // Unless the link has moved on meanwhile (its states are new objects each time).
      if (peer.state !== s) return;
      setStatus('closed', `disconnected${why ? ` (${why})` : ''}, retrying in ${(s.retryInMs / 1000).toFixed(1)} s`);
    };
    // The link tells 'waiting' from its own reaction to the close, before a reaction of
    // ours to that close could run: the code is read from the connection's `closed`
    // (settled by now), so the text names this drop, not the one before.
    const up = lastUp;
    if (up?.isClosed) up.closed.then(({ code, reason }) => show(`${code}${reason ? ` ${reason}` : ''}`));
    else show(null);
  } else setStatus('stopped', 'stopped');
});

function describeError(e) {
  if (e instanceof RpcError) return `error ${e.code}: ${e.message}${e.data !== undefined ? ` ${JSON.stringify(e.data)}` : ''}`;
  return e?.message ?? String(e);
}

/** Run a call and show its outcome in `out`; never throws. */
async function show(out, call) {
  out.classList.remove('error', 'fresh');
  out.textContent = '…';
  try {
    const result = await call();
    out.textContent = JSON.stringify(result);
  } catch (e) {
    out.classList.add('error');
    out.textContent = describeError(e);
  }
  void out.offsetWidth; // restart the highlight animation
  out.classList.add('fresh');
}

// ---- 1. calculator ---------------------------------------------------------------

/** @returns {[number, number]} */
function operands() {
  return [Number($('calc-a').value), Number($('calc-b').value)];
}

$('btn-positional').addEventListener('click', () => {
  const params = operands();
  $('calc-req-positional').textContent = `subtract ${JSON.stringify(params)}`;
  show($('calc-result-positional'), () => peer.call('subtract', params));
});

$('btn-named').addEventListener('click', () => {
  const [minuend, subtrahend] = operands();
  const params = { minuend, subtrahend };
  $('calc-req-named').textContent = `subtract ${JSON.stringify(params)}`;
  show($('calc-result-named'), () => peer.call('subtract', params));
});

$('calc-swap').addEventListener('click', () => {
  const a = $('calc-a').value;
  $('calc-a').value = $('calc-b').value;
  $('calc-b').value = a;
});
$('calc-form').addEventListener('submit', (e) => {
  e.preventDefault();
  $('btn-positional').click();
});

$('sum-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const params = $('sum-input').value.split(/[\s,;]+/).filter(Boolean).map(Number);
  $('sum-req').textContent = `sum ${JSON.stringify(params)}`;
  show($('sum-result'), () => peer.call('sum', params));
});

// ---- 2. live server push -----------------------------------------------------------

const WINDOW_MS = 30000;
/** @type {{t: number, v: number}[]} */
const samples = [];
let pushes = 0;
let drawQueued = false;

function onMetrics(_cx, m) {
  pushes += 1;
  $('push-count').textContent = String(pushes);
  if (typeof m?.value === 'number') $('metric-value').textContent = m.value.toFixed(2);
  if (typeof m?.connections === 'number') $('connections').textContent = String(m.connections);
  if (typeof m?.time_ms === 'number') {
    $('server-clock').textContent = new Date(m.time_ms).toLocaleTimeString([], { hour12: false }) +
      '.' + String(m.time_ms % 1000).padStart(3, '0').slice(0, 1);
    samples.push({ t: m.time_ms, v: m.value });
  }
  // Keep one window plus a margin: the chart never needs more.
  while (samples.length && samples[0].t < samples[samples.length - 1].t - WINDOW_MS - 2000) samples.shift();
  scheduleDraw();
}

function scheduleDraw() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => {
    drawQueued = false;
    drawChart();
  });
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function drawChart() {
  const canvas = $('chart');
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = canvas.clientHeight;
  if (!w || !h) return;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);

  const accent = cssVar('--accent') || '#4f46e5';
  const grid = cssVar('--grid') || '#ddd';
  const muted = cssVar('--muted') || '#888';
  const pad = { l: 44, r: 12, t: 10, b: 22 };
  const pw = w - pad.l - pad.r;
  const ph = h - pad.t - pad.b;

  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = muted;
  if (samples.length < 2) {
    ctx.textAlign = 'center';
    ctx.fillText('waiting for pushes…', w / 2, h / 2);
    return;
  }

  const tEnd = samples[samples.length - 1].t;
  // The window grows to 30 s as pushes arrive, so a fresh page shows a line, not a dot.
  const windowMs = Math.min(WINDOW_MS, Math.max(5000, tEnd - samples[0].t));
  const tStart = tEnd - windowMs;
  const visible = samples.filter((s) => s.t >= tStart);
  let lo = Math.min(...visible.map((s) => s.v));
  let hi = Math.max(...visible.map((s) => s.v));
  if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
  const span = hi - lo;
  lo -= span * 0.1;
  hi += span * 0.1;
  const x = (t) => pad.l + ((t - tStart) / windowMs) * pw;
  const y = (v) => pad.t + (1 - (v - lo) / (hi - lo)) * ph;

  // grid: 4 horizontal lines with labels, vertical lines every 1, 2 or 5 s (about 6 of them)
  ctx.strokeStyle = grid;
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad.l, yy);
    ctx.lineTo(w - pad.r, yy);
    ctx.stroke();
    ctx.fillText(v.toFixed(1), pad.l - 6, yy);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const stepS = [1, 2, 5].find((n) => n >= windowMs / 6000) ?? 5;
  for (let s = 0; s * 1000 <= windowMs; s += stepS) {
    const xx = Math.round(x(tEnd - s * 1000)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(xx, pad.t);
    ctx.lineTo(xx, pad.t + ph);
    ctx.stroke();
    ctx.fillText(s === 0 ? 'now' : `−${s}s`, xx, pad.t + ph + 6);
  }

  // area under the line, then the line, then the latest point
  ctx.save();
  ctx.beginPath();
  ctx.rect(pad.l, pad.t, pw, ph);
  ctx.clip();
  const path = new Path2D();
  visible.forEach((s, i) => (i ? path.lineTo(x(s.t), y(s.v)) : path.moveTo(x(s.t), y(s.v))));
  const area = new Path2D(path);
  area.lineTo(x(visible[visible.length - 1].t), pad.t + ph);
  area.lineTo(x(visible[0].t), pad.t + ph);
  area.closePath();
  const fill = ctx.createLinearGradient(0, pad.t, 0, pad.t + ph);
  fill.addColorStop(0, withAlpha(accent, 0.28));
  fill.addColorStop(1, withAlpha(accent, 0));
  ctx.fillStyle = fill;
  ctx.fill(area);
  ctx.strokeStyle = accent;
  ctx.lineWidth = 2;
  ctx.lineJoin = 'round';
  ctx.stroke(path);
  ctx.restore();
  const last = visible[visible.length - 1];
  ctx.fillStyle = accent;
  ctx.beginPath();
  ctx.arc(x(last.t), y(last.v), 4, 0, Math.PI * 2);
  ctx.fill();
}

/** `#rrggbb` plus alpha as rgba(); other colour syntaxes are returned unchanged. */
function withAlpha(color, a) {
  const m = /^#([0-9a-f]{6})$/i.exec(color);
  if (!m) return color;
  const n = parseInt(m[1], 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

new ResizeObserver(scheduleDraw).observe($('chart'));
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', scheduleDraw);

// ---- 3. the server calls the browser ----------------------------------------------

/** Set while our demo.ask_browser call is in flight, so ui.describe can mark its steps. */
let asking = null;

function step(n, state, note) {
  const li = /** @type {HTMLElement} */ (document.querySelector(`#ask-steps li[data-step="${n}"]`));
  li.dataset.state = state;
  li.querySelector('.note')?.remove();
  if (note) {
    const span = document.createElement('span');
    span.className = 'note';
    span.textContent = note;
    li.append(span);
  }
}

function describeUi() {
  const answer = {
    viewport: { width: window.innerWidth, height: window.innerHeight },
    language: navigator.language,
    time: new Date().toISOString(),
    userAgent: navigator.userAgent,
  };
  if (asking) {
    step(2, 'done', `+${Math.round(performance.now() - asking.t0)} ms`);
    step(3, 'done', `${answer.viewport.width}×${answer.viewport.height}, ${answer.language}`);
    step(4, 'active');
  }
  return answer;
}

$('btn-ask').addEventListener('click', async () => {
  const out = $('ask-result');
  for (const n of [1, 2, 3, 4]) step(n, '');
  step(1, 'done');
  step(2, 'active');
  out.classList.remove('error');
  out.textContent = 'waiting for the server…';
  asking = { t0: performance.now() };
  try {
    const result = await peer.call('demo.ask_browser');
    step(4, 'done', `server measured ${result?.elapsed_ms} ms`);
    out.textContent = JSON.stringify(result, null, 2);
  } catch (e) {
    for (const n of [2, 3, 4]) {
      const li = /** @type {HTMLElement} */ (document.querySelector(`#ask-steps li[data-step="${n}"]`));
      if (li.dataset.state !== 'done') step(n, 'failed');
    }
    out.classList.add('error');
    out.textContent = describeError(e);
  } finally {
    asking = null;
  }
});

// ---- 4. long task ----------------------------------------------------------------

/** The running task's AbortController, while one runs. */
let task = null;
const CANCELLED = 'cancelled by you';

async function showTasksRunning() {
  try {
    $('tasks-running').textContent = String(await peer.call('demo.tasks_running', []));
  } catch (e) {
    $('tasks-running').textContent = describeError(e);
  }
}

$('task-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  if (task) return;
  const seconds = Number($('task-seconds').value);
  const controller = new AbortController();
  task = controller;
  const bar = $('task-progress');
  const status = $('task-status');
  bar.value = 0;
  status.classList.remove('error');
  status.textContent = 'running…';
  $('btn-task-start').disabled = true;
  $('btn-task-cancel').disabled = false;
  let shownCount = false;
  try {
    const result = await peer.call('demo.long_task', { seconds }, {
      signal: controller.signal,
      timeoutMs: seconds * 1000 + 10000,
      onProgress: (p) => {
        if (typeof p?.fraction === 'number') bar.value = p.fraction;
        status.textContent = `running… ${Math.round((p?.fraction ?? 0) * 100)} %`;
        // Once the task is known to run, show the server's count.
        if (!shownCount) {
          shownCount = true;
          showTasksRunning();
        }
      },
    });
    bar.value = 1;
    status.textContent = JSON.stringify(result);
  } catch (err) {
    status.classList.add('error');
    status.textContent = err?.message === CANCELLED ? 'cancelled' : describeError(err);
  } finally {
    task = null;
    $('btn-task-start').disabled = false;
    $('btn-task-cancel').disabled = true;
    showTasksRunning();
  }
});

$('btn-task-cancel').addEventListener('click', () => task?.abort(new Error(CANCELLED)));

// ---- 5. chat -------------------------------------------------------------------

const nameInput = $('chat-name');
nameInput.value = localStorage.getItem('jsonrpc-peer-demo.name') || `guest-${Math.floor(1000 + Math.random() * 9000)}`;
nameInput.addEventListener('change', () => localStorage.setItem('jsonrpc-peer-demo.name', nameInput.value));

/** @typedef {import('./demo-api.js').ChatMessage} ChatLine a line, as the server describes it */

// The chat is a topic the link follows: after every reconnect it subscribes again from
// the offset of the last line shown, and the server sends exactly the lines typed
// meanwhile (each once, in order) before the live ones. When it cannot (the server
// restarted, or the lines left its history), the page reloads the chat's last lines.
//
// The page is also in the chat's presence, under its name: it hears every page that
// comes and goes (on every server of a cluster) and shows who is here.
const chat = peer.topic('chat.message', {
  info: () => ({ name: nameInput.value.trim() || 'guest' }),
  presence: true,
  onPresence: (members) => showWho(members),
  onData: (line, { offset }) => onChatLine(line, offset),
  onSubscribed: (s) => {
    if (reloadOwed) {
      // A reload was cut short: the position had moved past lines never shown, so this
      // answer (even "recovered") does not make the chat whole. Reload once more, unless
      // onMissed (told right after this, if at all) already does.
      queueMicrotask(() => {
        if (reloadOwed && !arrivedWhileReloading) void reloadChat();
      });
      return;
    }
    if (!s.history) showSync('live', 'live (no history kept: after a reconnect the chat reloads)');
    else if (s.from === null) showSync('live', 'live');
    else if (s.recovered) {
      const n = s.offset - s.from.offset;
      showSync('recovered', `recovered after a reconnect: ${n} missed line${n === 1 ? '' : 's'} replayed`);
    }
    // recovered: false: onMissed follows.
  },
  onMissed: () => void reloadChat(),
  onFailed: (e) => showSync('failed', `chat: ${describeError(e)}`),
});

/** @typedef {import('./demo-api.js').ChatMember} ChatMember a page in the chat */

/**
 * Shows who is in the chat: each name once, with how many pages (tabs) it has open.
 * @param {ChatMember[]} members
 */
function showWho(members) {
  /** @type {Map<string, number>} */
  const pages = new Map();
  for (const m of members) {
    const name = String(m?.info?.name ?? '?');
    pages.set(name, (pages.get(name) ?? 0) + 1);
  }
  const list = $('chat-who');
  list.replaceChildren(...[...pages].sort(([a], [b]) => a.localeCompare(b)).map(([name, n]) => {
    const li = document.createElement('li');
    li.setAttribute('data-testid', 'chat-member');
    li.dataset.name = name;
    li.dataset.pages = String(n);
    li.textContent = n > 1 ? `${name} ×${n}` : name;
    if (name === (nameInput.value.trim() || 'guest')) li.classList.add('mine');
    return li;
  }));
  $('chat-who-count').textContent = `${pages.size} here`;
  $('chat-who-count').dataset.members = String(members.length);
}

/** Shows where the chat stands against the server: live, recovered, missed. */
function showSync(state, text) {
  const el = $('chat-sync');
  el.dataset.state = state;
  el.textContent = text;
}

/** While `chat.recent` is on its way, the lines that arrive wait here: {line, offset}. */
let arrivedWhileReloading = null;
let reloadAgain = false;
/** A reload failed: the chat lacks lines its position is past; the next subscribe reloads. */
let reloadOwed = false;
const CHAT_KEEP = 100;
/** @type {{line: ChatLine, offset: number}[]} the lines shown, oldest first */
let shown = [];

/** @param {ChatLine} line @param {number} offset */
function onChatLine(line, offset) {
  if (arrivedWhileReloading) arrivedWhileReloading.push({ line, offset });
  else showChatLine(line, offset);
}

/** Lines were missed: show the server's last lines, and what arrived meanwhile. */
async function reloadChat() {
  if (arrivedWhileReloading) {
    reloadAgain = true; // missed again during the reload: once more after it
    return;
  }
  arrivedWhileReloading = [];
  showSync('reloading', 'missed some lines, reloading…');
  try {
    const { epoch, lines } = await peer.call('chat.recent');
    const recent = lines.map((l) => ({ line: l, offset: l.offset ?? 0 }));
    let all;
    if (epoch && epoch === chat.position?.epoch) {
      // With history: the server's last lines, then those that came after the newest.
      const newest = recent.at(-1)?.offset ?? 0;
      all = [...recent, ...arrivedWhileReloading.filter((l) => l.offset > newest)];
    } else if (epoch) {
      // The history changed again meanwhile: what the server has, then what came.
      all = [...recent, ...arrivedWhileReloading];
    } else {
      // Without history (a cluster, for now) the server has only its own node's lines:
      // they join those shown, each once, in the order they were written.
      const key = ({ line: l }) => `${l.at_ms}\u0000${l.name}\u0000${l.text}`;
      const seen = new Set();
      all = [...shown, ...recent, ...arrivedWhileReloading]
        .filter((l) => !seen.has(key(l)) && seen.add(key(l)))
        .sort((x, y) => x.line.at_ms - y.line.at_ms);
    }
    shown = [];
    $('chat-log').replaceChildren();
    for (const { line, offset } of all) showChatLine(line, offset);
    reloadOwed = false;
    showSync('missed', 'missed, reloaded');
  } catch (e) {
    for (const { line, offset } of arrivedWhileReloading) showChatLine(line, offset);
    // Owed until one succeeds: the next (re)subscribe reloads, and is not "recovered".
    reloadOwed = true;
    showSync('failed', `missed some lines; reloading failed: ${describeError(e)} (again after the next reconnect)`);
  } finally {
    arrivedWhileReloading = null;
  }
  if (reloadAgain) {
    reloadAgain = false;
    await reloadChat();
  }
}

/** @param {ChatLine} m @param {number} offset its offset in the chat's history (0: none) */
function showChatLine(m, offset) {
  shown.push({ line: m, offset });
  if (shown.length > CHAT_KEEP) shown.shift();
  const log = $('chat-log');
  log.querySelector('.empty')?.remove();
  const li = document.createElement('li');
  li.setAttribute('data-testid', 'chat-message');
  if (offset) li.dataset.offset = String(offset);
  if (m?.name === nameInput.value) li.classList.add('mine');
  const head = document.createElement('div');
  head.className = 'chat-head';
  const who = document.createElement('strong');
  who.textContent = String(m?.name ?? '?');
  const when = document.createElement('time');
  when.textContent = typeof m?.at_ms === 'number' ? new Date(m.at_ms).toLocaleTimeString([], { hour12: false }) : '';
  head.append(who, when);
  const text = document.createElement('div');
  text.className = 'chat-text';
  text.textContent = String(m?.text ?? '');
  li.append(head, text);
  log.append(li);
  while (log.children.length > CHAT_KEEP) log.firstElementChild.remove();
  log.scrollTop = log.scrollHeight;
}

$('chat-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const text = $('chat-text').value.trim();
  const name = nameInput.value.trim() || 'guest';
  if (!text || !peer) return;
  const status = $('chat-status');
  status.classList.remove('error');
  // The box is emptied as the line leaves, not when its answer comes: the line itself
  // often arrives first, and what is typed after it is the next line, never to be lost.
  const box = $('chat-text');
  box.value = '';
  refillChatBox(); // a line that failed before, if one waits
  try {
    const { delivered } = await peer.call('chat.send', { name, text });
    status.textContent = `delivered to ${delivered} page${delivered === 1 ? '' : 's'}`;
  } catch (err) {
    // Not sent: back in the box, to send again. What is there (a draft, or a line that
    // failed before) stays: this one waits its turn, listed under the box.
    unsent.push(text);
    refillChatBox();
    status.classList.add('error');
    status.textContent = describeError(err);
  }
});

/** @type {string[]} the lines that failed to send and wait for the box, oldest first */
const unsent = [];

/** An empty box takes the oldest line that failed; those still waiting are listed under it. */
function refillChatBox() {
  const box = $('chat-text');
  if (!box.value && unsent.length) box.value = unsent.shift();
  $('chat-unsent').replaceChildren(...unsent.map((text) => {
    const li = document.createElement('li');
    li.setAttribute('data-testid', 'chat-unsent-line');
    li.textContent = text;
    return li;
  }));
  $('chat-unsent-box').hidden = unsent.length === 0;
}

// ---- 6. wire log ----------------------------------------------------------------

const WIRE_KEEP = 200;
const counts = { in: 0, out: 0 };

/** A short label for a frame: method, or which id it answers. */
function summarize(text) {
  let m;
  try {
    m = JSON.parse(text);
  } catch {
    return 'unparsable';
  }
  const one = (x) => {
    if (!x || typeof x !== 'object') return 'invalid';
    if (typeof x.method === 'string') return 'id' in x ? `call ${x.method}` : `notify ${x.method}`;
    if ('error' in x) return `error #${JSON.stringify(x.id)} ${x.error?.code ?? ''}`.trim();
    if ('result' in x) return `result #${JSON.stringify(x.id)}`;
    return 'invalid';
  };
  return Array.isArray(m) ? `batch[${m.length}] ${m.map(one).join(', ')}` : one(m);
}

function logFrame(direction, text) {
  counts[direction] += 1;
  $('wire-counts').textContent = `${counts.in} in · ${counts.out} out`;
  const what = summarize(text);
  // metrics arrive 4 times a second and would push everything else out of view
  if (what === 'notify metrics' && !$('wire-metrics').checked) return;
  const tr = document.createElement('tr');
  tr.setAttribute('data-testid', 'wire-row');
  tr.dataset.direction = direction;
  const now = new Date();
  const cells = [
    now.toLocaleTimeString([], { hour12: false }) + '.' + String(now.getMilliseconds()).padStart(3, '0'),
    direction === 'in' ? '↓ in' : '↑ out',
    what,
    text,
  ];
  for (const [i, c] of cells.entries()) {
    const td = document.createElement('td');
    td.textContent = c;
    if (i === 3) td.title = text;
    tr.append(td);
  }
  const body = $('wire-log');
  body.prepend(tr); // newest first: what just happened is at the top
  while (body.children.length > WIRE_KEEP) body.lastElementChild.remove();
}

$('wire-clear').addEventListener('click', () => $('wire-log').replaceChildren());

// ---- start -------------------------------------------------------------------------

setStatus('connecting', 'connecting…');
