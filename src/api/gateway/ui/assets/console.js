// outpost console: live updates over /ui/events and filtering as you type.
// Plain script, no dependencies; served from /ui/assets under a CSP without
// 'unsafe-inline'. Event data is written with textContent only.
(function () {
  'use strict';
  var body = document.body;
  var page = body.getAttribute('data-page');
  var node = body.getAttribute('data-node');
  var live = document.getElementById('live');

  // --- Fleet: filter the rows shown as the operator types (the server filters on submit).
  var filter = document.getElementById('filter');
  var rows = document.getElementById('fleet-rows');
  function applyFilter() {
    if (!filter || !rows) { return; }
    var needle = filter.value.trim().toLowerCase();
    var trs = rows.querySelectorAll('tr[data-node-id]');
    for (var i = 0; i < trs.length; i++) {
      var id = trs[i].getAttribute('data-node-id').toLowerCase();
      var state = trs[i].getAttribute('data-liveness');
      trs[i].hidden = needle !== '' && id.indexOf(needle) < 0 && state !== needle;
    }
  }
  if (filter) { filter.addEventListener('input', applyFilter); }

  // --- Refetch what changed, at most once a second.
  function fragmentUrl() {
    if (page === 'fleet') { return '/ui/fleet/rows' + window.location.search; }
    if (page === 'node') { return '/ui/nodes/' + encodeURIComponent(node) + '/queue'; }
    return null;
  }
  function target() {
    return page === 'fleet' ? rows : document.getElementById('node-queue');
  }
  var pending = false;
  var lastFetch = 0;
  function refresh() {
    var url = fragmentUrl();
    var el = target();
    if (!url || !el) { return; }
    lastFetch = Date.now();
    fetch(url, { credentials: 'same-origin', cache: 'no-store' }).then(function (r) {
      if (r.status === 401) { window.location.assign('/ui/login'); return null; }
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (html === null) { return; }
      el.innerHTML = html;
      applyFilter();
    }).catch(function () {});
  }
  function soon() {
    if (pending) { return; }
    var wait = Math.max(0, 1000 - (Date.now() - lastFetch));
    pending = true;
    window.setTimeout(function () { pending = false; refresh(); }, wait);
  }

  // --- Node page: the node's events as they happen.
  var list = document.getElementById('node-events');
  function prepend(type, data, id) {
    if (!list) { return; }
    var li = document.createElement('li');
    if (id) { li.setAttribute('data-event-id', id); }
    var t = document.createElement('time');
    t.textContent = new Date(data.ts_ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
    var b = document.createElement('b');
    b.textContent = type;
    li.appendChild(t);
    li.appendChild(document.createTextNode(' '));
    li.appendChild(b);
    var detail = data.message_id || '';
    if (data.reason) { detail += ': ' + data.reason; }
    if (data.code) { detail += ': ' + data.code; }
    li.appendChild(document.createTextNode(' ' + detail));
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 50) { list.removeChild(list.lastChild); }
  }
  function setNodeLiveness(state) {
    var el = document.getElementById('node-liveness');
    if (!el) { return; }
    el.setAttribute('data-liveness', state);
    el.className = 'state ' + state;
    el.textContent = state;
  }

  var KINDS = ['queued', 'delivered', 'expired', 'rejected', 'dead', 'result', 'node_online', 'node_offline'];
  // From the newest event the page was rendered with, then the newest one seen:
  // nothing falls in between, however often the stream is closed and opened again.
  var lastEvent = body.getAttribute('data-last-event');
  var es = null;
  function onEvent(kind, e) {
    if (e.lastEventId) { lastEvent = e.lastEventId; }
    var data;
    try { data = JSON.parse(e.data); } catch (err) { return; }
    if (page === 'node') {
      if (data.node_id !== node) { return; }
      prepend(kind, data, e.lastEventId);
      if (kind === 'node_online') { setNodeLiveness('online'); }
      if (kind === 'node_offline') { setNodeLiveness('offline'); }
    }
    soon();
  }
  function openStream() {
    if (es || !window.EventSource || (page !== 'fleet' && page !== 'node')) { return; }
    es = new EventSource('/ui/events' + (lastEvent ? '?after=' + encodeURIComponent(lastEvent) : ''));
    es.onopen = function () { if (live) { live.textContent = 'live'; live.className = 'live on'; } };
    es.onerror = function () { if (live) { live.textContent = 'reconnecting'; live.className = 'live'; } };
    KINDS.forEach(function (kind) {
      es.addEventListener(kind, function (e) { onEvent(kind, e); });
    });
  }
  function closeStream() {
    if (!es) { return; }
    es.close();
    es = null;
    if (live) { live.textContent = 'paused'; live.className = 'live'; }
  }
  openStream();
  // A page left for another may be kept in the back/forward cache: it must not hold its
  // stream (a browser allows only 6 connections per host over HTTP/1.1, and kept pages
  // would use them all). Closed when the page is hidden, opened again when it is shown.
  window.addEventListener('pagehide', closeStream);
  window.addEventListener('pageshow', function () {
    if (es) { return; }
    openStream();
    soon();
  });
  // Stale, offline and dead follow from silence, which sends no event.
  if (page === 'fleet' || page === 'node') { window.setInterval(soon, 15000); }
  applyFilter();
}());
