// The asyncflow dashboard, part 1 of 7: what every view uses. The page talks only to the
// documented JSON API under /v1, with the bearer token kept in localStorage. Everything that
// comes from the server is put on the page as text (through el() below), never as HTML.
// The other files add their views to window.AF; app.js (loaded last) routes and polls.
'use strict';

window.AF = (() => {
  const TOKEN_KEY = 'asyncflow.token';
  // task statuses, then those of workflow runs, their nodes and callbacks
  const STATUSES = ['pending', 'running', 'succeeded', 'failed', 'cancelled',
    'scheduled', 'timed_out', 'waiting', 'external', 'skipped', 'delivered'];

  const $ = (selector) => document.querySelector(selector);

  const state = {
    // where the message on screen came from ('poll' or 'action'), so a good poll clears only its own
    messageSource: null,
  };

  // ---- small helpers -------------------------------------------------------------------------

  /** An element with attributes and children; strings become text nodes, never markup. */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'onclick') node.addEventListener('click', value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function storageGet(key) {
    try {
      return window.localStorage.getItem(key);
    } catch {
      return null;
    }
  }

  function storageSet(key, value) {
    try {
      if (value === null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, value);
      return true;
    } catch {
      return false;
    }
  }

  function fmtInt(n) {
    return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
  }

  /** Seconds as "4.2s", "37s", "5m 03s", "2h 07m", "3d 04h". */
  function fmtAge(seconds) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return '—';
    const s = Math.max(0, seconds);
    const pad = (n) => String(Math.floor(n)).padStart(2, '0');
    if (s < 10) return `${s.toFixed(1)}s`;
    if (s < 60) return `${Math.round(s)}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${pad((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${pad((s % 86400) / 3600)}h`;
  }

  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
  }

  function fmtJson(value) {
    if (value === undefined || value === null) return '—';
    try {
      return JSON.stringify(value, null, 2);
    } catch {
      return String(value);
    }
  }

  function statusBadge(status) {
    const known = STATUSES.includes(status) ? status : 'unknown';
    return el('span', { class: `badge status-${known}` }, status);
  }

  function showMessage(text, kind, source) {
    const box = $('#message');
    box.textContent = text;
    box.className = kind;
    box.hidden = false;
    state.messageSource = source;
  }

  function clearMessage(source) {
    if (source && state.messageSource !== source) return;
    const box = $('#message');
    box.hidden = true;
    box.textContent = '';
    state.messageSource = null;
  }

  // ---- the API -------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** Calls the API; `body` (an object) goes as JSON. Throws ApiError with the server's message. */
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const token = storageGet(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, 'network', `Cannot reach the server (${e.message}).`);
    }
    let answer = null;
    try {
      answer = await response.json();
    } catch {
      // not JSON: the status line says enough
    }
    if (!response.ok) {
      let message = answer && typeof answer.message === 'string' ? answer.message : `${response.status} ${response.statusText}`;
      if (response.status === 401) {
        message = token
          ? 'The server refused the saved token: enter a valid one in the Token field.'
          : 'The server needs a bearer token: enter it in the Token field.';
      }
      throw new ApiError(response.status, answer && answer.code, message);
    }
    return answer;
  }

  /** Runs a user action, showing its error instead of throwing. */
  async function run(action) {
    try {
      await action();
    } catch (e) {
      showMessage(e.message || String(e), 'error', 'action');
    }
  }

  function taskLink(id) {
    return el('a', { href: `#task=${encodeURIComponent(id)}` }, id);
  }

  function runLink(id) {
    return el('a', { href: `#run=${encodeURIComponent(id)}` }, id);
  }

  /** A <dl> entry: label and value (an element or text; "—" when missing). */
  function field(dl, label, key, value) {
    dl.append(el('dt', {}, label), el('dd', { 'data-field': key }, value === undefined || value === null ? '—' : value));
  }

  return {
    TOKEN_KEY, $, el, state, storageGet, storageSet, fmtInt, fmtAge, fmtTime, fmtJson, statusBadge,
    showMessage, clearMessage, ApiError, api, run, taskLink, runLink, field,
    // views register here: name -> {show(params), refresh()}
    views: {},
  };
})();
