/* page.js: the page's behaviour.  Images picked, dropped or pasted are read as data: URLs and go
 * with the next question as image_url parts; the conversation is the OpenAI messages array, sent
 * whole to /v1/chat/completions with stream:true and read as server-sent events.  Boxes and points
 * in Qwen3-VL's format (bbox_2d [x1, y1, x2, y2] / point_2d [x, y] on 0-1000, relative to the
 * image) found in an answer are drawn over the image on stage (the last image sent) as .box /
 * .point elements placed in % of it.  The API key, asked when the server answers 401, is kept in
 * sessionStorage (this tab only). */
'use strict';

const $ = (s) => document.querySelector(s);
const KEY = 'iris-api-key';
const state = { messages: [], pending: [], key: sessionStorage.getItem(KEY) || '', busy: false, abort: null };

function showError(msg) {
  const e = $('#error');
  e.textContent = msg;
  e.hidden = false;
}
function clearError() { $('#error').hidden = true; }

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (state.key) h.Authorization = 'Bearer ' + state.key;
  return h;
}

/* The server's error body (OpenAI's shape) as one line. */
async function errorText(res) {
  let msg = res.status + ' ' + res.statusText;
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) msg = j.error.message + ' (' + res.status + ')';
  } catch (e) { /* not JSON: keep the status line */ }
  return msg;
}

function askKey(why) {
  $('#key-why').textContent = why;
  $('#keyform').hidden = false;
  $('#apikey').focus();
}

async function loadModels() {
  let res;
  try {
    res = await fetch('/v1/models', { headers: headers(false) });
  } catch (e) {
    $('#status').textContent = 'server unreachable';
    return showError('Cannot reach the server: ' + e.message);
  }
  if (res.status === 401) {
    $('#status').textContent = 'API key needed';
    const msg = state.key ? 'The API key was refused (401): enter the right key.' : 'This server needs an API key.';
    showError(msg);
    return askKey(msg);
  }
  if (!res.ok) return showError('Listing the models failed: ' + await errorText(res));
  const list = (await res.json()).data || [];
  const sel = $('#model');
  sel.textContent = '';
  for (const m of list) sel.append(new Option(m.id, m.id));
  clearError();
  $('#keyform').hidden = true;
  $('#status').textContent = list.length ? 'model: ' + list[0].id : 'no model';
}

/* ---- images ---- */

function addFiles(files) {
  for (const f of files) {
    if (!f.type.startsWith('image/')) { showError(f.name + ': not an image'); continue; }
    const r = new FileReader();
    r.onload = () => { state.pending.push({ url: r.result, name: f.name }); renderThumbs(); setStage(r.result); };
    r.onerror = () => showError(f.name + ': cannot be read');
    r.readAsDataURL(f);
  }
}

function renderThumbs() {
  const t = $('#thumbs');
  t.textContent = '';
  state.pending.forEach((im, i) => {
    const d = document.createElement('div');
    d.className = 'thumb';
    const img = new Image();
    img.src = im.url;
    img.alt = im.name;
    const x = document.createElement('button');
    x.type = 'button';
    x.textContent = '×';
    x.title = 'remove';
    x.onclick = () => { state.pending.splice(i, 1); renderThumbs(); };
    d.append(img, x);
    t.append(d);
  });
}

function setStage(url) {
  const img = $('#stage-img');
  /* small images shown at 360 px wide at least (max-width keeps them in the panel), so boxes read */
  img.onload = () => { img.style.width = img.naturalWidth < 360 ? '360px' : ''; };
  img.src = url;
  $('#stage').hidden = false;
  $('#drop-hint').hidden = true;
  $('#overlay').textContent = '';
}

/* ---- grounding ---- */

/* The index of the '}' closing the '{' at s[i], or -1 (strings and escapes respected). */
function matchBrace(s, i) {
  let depth = 0, str = false;
  for (; i < s.length; i++) {
    const c = s[i];
    if (str) { if (c === '\\') i++; else if (c === '"') str = false; }
    else if (c === '"') str = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i;
  }
  return -1;
}

const nums = (a, k) => Array.isArray(a) && a.length === k && a.every((v) => typeof v === 'number' && isFinite(v));

/* Every {"bbox_2d": [...]} / {"point_2d": [...]} object in the text, in order (in lists, fences,
 * prose or nested objects alike). */
function parseBoxes(text) {
  const out = [];
  for (let i = text.indexOf('{'); i >= 0; i = text.indexOf('{', i)) {
    const end = matchBrace(text, i);
    if (end < 0) break;
    let o = null;
    try { o = JSON.parse(text.slice(i, end + 1)); } catch (e) { /* not JSON: step inside */ }
    const label = o && typeof o.label === 'string' ? o.label : '';
    if (o && nums(o.bbox_2d, 4)) out.push({ box: o.bbox_2d, label });
    else if (o && nums(o.point_2d, 2)) out.push({ point: o.point_2d, label });
    else { i++; continue; }
    i = end + 1;
  }
  return out;
}

const PALETTE = ['#e6194b', '#3cb44b', '#0082c8', '#f58230', '#911eb4', '#008080'];
const pct = (v) => Math.min(100, Math.max(0, v / 10)) + '%';

function drawBoxes(found) {
  const ov = $('#overlay');
  ov.textContent = '';
  found.forEach((b, i) => {
    const el = document.createElement('div');
    const color = PALETTE[i % PALETTE.length];
    if (b.box) {
      const [x1, y1, x2, y2] = b.box;
      el.className = 'box' + (Math.min(y1, y2) < 60 ? ' low' : '');
      el.style.left = pct(Math.min(x1, x2));
      el.style.top = pct(Math.min(y1, y2));
      el.style.width = Math.abs(x2 - x1) / 10 + '%';
      el.style.height = Math.abs(y2 - y1) / 10 + '%';
      el.style.borderColor = color;
      el.dataset.box = b.box.join(',');
    } else {
      el.className = 'point';
      el.style.left = pct(b.point[0]);
      el.style.top = pct(b.point[1]);
      el.style.background = color;
      el.dataset.point = b.point.join(',');
    }
    if (b.label) {
      const l = document.createElement('span');
      l.className = 'box-label';
      l.textContent = b.label;
      l.style.background = color;
      el.append(l);
    }
    ov.append(el);
  });
}

/* ---- the conversation ---- */

function bubble(role, text, images) {
  const d = document.createElement('div');
  d.className = 'msg ' + role;
  for (const im of images || []) { const i = new Image(); i.src = im.url; i.alt = im.name; d.append(i); }
  d.append(document.createTextNode(text));
  $('#log').append(d);
  $('#log').scrollTop = $('#log').scrollHeight;
  return d;
}

function setBusy(b) {
  state.busy = b;
  $('#send').disabled = b;
  $('#stop').hidden = !b;
  for (const q of document.querySelectorAll('.quick button')) q.disabled = b;
}

function requestBody() {
  const body = { model: $('#model').value || undefined, messages: state.messages, stream: true,
                 stream_options: { include_usage: true } };
  const mt = parseInt($('#max-tokens').value, 10);
  if (mt > 0) body.max_tokens = mt;
  const t = $('#temperature').value.trim();
  if (t !== '') body.temperature = parseFloat(t);
  return body;
}

/* Read the SSE stream into the answer element; returns the text and the usage. */
async function readStream(res, el, t0) {
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = '', text = '', usage = null, tFirst = 0, chunks = 0, done = false;
  while (!done) {
    const r = await reader.read();
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') { done = true; break; }
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message || 'the server failed mid-answer');
        if (j.usage) usage = j.usage;
        const d = j.choices && j.choices[0] && j.choices[0].delta;
        if (d && d.content) {
          if (!tFirst) tFirst = performance.now();
          chunks++;
          text += d.content;
          el.textContent = text;
          if (d.content.includes('}')) drawBoxes(parseBoxes(text)); /* boxes appear as they close */
        }
      }
    }
  }
  const tEnd = performance.now();
  const n = usage ? usage.completion_tokens : chunks;
  const rate = n > 1 && tEnd > tFirst ? ((n - 1) * 1000 / (tEnd - tFirst)).toFixed(1) : '–';
  $('#stats').textContent = (tFirst ? 'first token ' + Math.round(tFirst - t0) + ' ms · ' : '') +
    n + ' tokens · ' + rate + ' tok/s';
  return text;
}

async function send(text) {
  if (state.busy) return;
  text = (text || '').trim();
  if (!text) { $('#prompt').focus(); return; }
  clearError();
  const images = state.pending.splice(0);
  renderThumbs();
  const content = images.map((im) => ({ type: 'image_url', image_url: { url: im.url } }));
  content.push({ type: 'text', text });
  state.messages.push({ role: 'user', content: images.length ? content : text });
  bubble('user', text, images);
  if (images.length) setStage(images[images.length - 1].url);
  $('#prompt').value = '';
  const old = $('#answer');
  if (old) old.removeAttribute('id');
  const el = bubble('assistant', '');
  el.id = 'answer';
  setBusy(true);
  state.abort = new AbortController();
  const t0 = performance.now();
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(true),
      body: JSON.stringify(requestBody()), signal: state.abort.signal });
    if (res.status === 401) {
      askKey('The API key was refused (401): enter the right key, then send again.');
      throw new Error('The API key was refused (401): enter the right key, then send again.');
    }
    if (!res.ok) throw new Error(await errorText(res));
    const answer = await readStream(res, el, t0);
    state.messages.push({ role: 'assistant', content: answer });
    drawBoxes(parseBoxes(answer));
  } catch (e) {
    state.messages.pop(); /* the question goes again with the next send */
    el.classList.add('failed');
    el.textContent = e.name === 'AbortError' ? '(stopped)' : 'Error: ' + e.message;
    if (e.name !== 'AbortError') showError(e.message);
  } finally {
    setBusy(false);
    state.abort = null;
  }
}

function findPrompt() {
  const what = $('#prompt').value.trim();
  return what ? 'Locate every instance that belongs to the following categories: "' + what +
                '". Report bbox coordinates in JSON format.'
              : 'Locate every object in the image. Report bbox coordinates in JSON format.';
}

/* ---- wiring ---- */

function init() {
  $('#image').addEventListener('change', (e) => { addFiles(e.target.files); e.target.value = ''; });
  const drop = $('#drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); drop.classList.remove('over'); addFiles(e.dataTransfer.files); });
  document.addEventListener('paste', (e) => {
    const files = [...(e.clipboardData ? e.clipboardData.files : [])];
    if (files.length) { e.preventDefault(); addFiles(files); }
  });
  $('#ask').addEventListener('submit', (e) => { e.preventDefault(); send($('#prompt').value); });
  $('#prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send($('#prompt').value); }
  });
  $('#stop').addEventListener('click', () => state.abort && state.abort.abort());
  for (const b of document.querySelectorAll('.quick button'))
    b.addEventListener('click', () => send(b.dataset.find ? findPrompt() : b.dataset.prompt));
  $('#keyform').addEventListener('submit', (e) => {
    e.preventDefault();
    state.key = $('#apikey').value.trim();
    sessionStorage.setItem(KEY, state.key);
    loadModels();
  });
  $('#change-key').addEventListener('click', () => askKey('API key for this server (kept in this tab only).'));
  $('#new').addEventListener('click', () => {
    state.messages = [];
    $('#log').textContent = '';
    $('#stats').textContent = '';
    $('#overlay').textContent = '';
    clearError();
  });
  loadModels();
}

init();
