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

  // --- Refetch what changed, at most once a second: on the fleet page the rows and
  // the totals and chart above them (liveness follows silence: they change together),
  // on a node's page its queue, facts and its labels, inventory and state panels.
  function parts() {
    if (page === 'fleet') {
      return [
        ['/ui/fleet/rows' + window.location.search, rows],
        ['/ui/fleet/summary' + window.location.search, document.getElementById('fleet-summary')]
      ];
    }
    if (page === 'node') {
      var base = '/ui/nodes/' + encodeURIComponent(node);
      return [
        [base + '/queue', document.getElementById('node-queue')],
        [base + '/facts', document.getElementById('node-summary')],
        [base + '/fleet_state', document.getElementById('node-fleet-state')]
      ];
    }
    if (page === 'rollouts') {
      return [['/ui/rollouts/rows', document.getElementById('rollout-rows')]];
    }
    if (page === 'rollout' && rolloutBody) {
      return [['/ui/rollouts/' + encodeURIComponent(rolloutId) + '/body', rolloutBody, keepCancelTick]];
    }
    return [];
  }
  // --- A rollout's page: its id, and the Cancel box kept ticked across a refresh
  // (the button is enabled only once it is). Read when the new body arrives, not when
  // it was asked for: a tick made while the fetch was under way is kept too.
  var rolloutBody = document.getElementById('rollout-body');
  var rolloutId = rolloutBody && rolloutBody.getAttribute('data-rollout-id');
  function checkCancel() {
    var box = document.getElementById('cancel-confirm');
    var button = document.getElementById('cancel-button');
    if (box && button) { button.disabled = !box.checked; }
  }
  function keepCancelTick() {
    var box = document.getElementById('cancel-confirm');
    var ticked = !!box && box.checked;
    return function () {
      var again = document.getElementById('cancel-confirm');
      if (again) { again.checked = ticked; }
      checkCancel();
    };
  }
  // `keep`, when given, is called just before the swap and returns what to do after it
  // (what the operator set in the old content, read at that moment, put back).
  function fetchInto(url, el, keep) {
    if (!el) { return; }
    fetch(url, { credentials: 'same-origin', cache: 'no-store' }).then(function (r) {
      if (r.status === 401) { window.location.assign('/ui/login'); return null; }
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (html === null) { return; }
      var after = keep ? keep() : null;
      el.innerHTML = html;
      if (after) { after(); }
    }).catch(function () {});
  }
  var pending = false;
  var lastFetch = 0;
  function refresh() {
    lastFetch = Date.now();
    parts().forEach(function (p) { fetchInto(p[0], p[1], p[2] || function () { return applyFilter; }); });
    followCall();
  }
  function soon() {
    if (pending) { return; }
    var wait = Math.max(0, 1000 - (Date.now() - lastFetch));
    pending = true;
    window.setTimeout(function () { pending = false; refresh(); }, wait);
  }

  // --- Fleet: the enrollments waiting for approval, again when one is asked or decided
  // (the boxes ticked stay ticked, those ticked while the list was on its way too).
  var pendingSlot = document.getElementById('pending-slot');
  function keepTicked() {
    var ticked = {};
    pendingSlot.querySelectorAll('input[name=node]:checked').forEach(function (b) { ticked[b.value] = true; });
    return function () {
      pendingSlot.querySelectorAll('input[name=node]').forEach(function (b) { b.checked = !!ticked[b.value]; });
    };
  }
  function refreshPending() {
    if (!pendingSlot) { return; }
    fetchInto('/ui/fleet/pending' + window.location.search, pendingSlot, keepTicked);
  }
  document.addEventListener('change', function (e) {
    if (e.target && e.target.id === 'cancel-confirm') { checkCancel(); }
    if (e.target && e.target.id === 'select-all') {
      document.querySelectorAll('#pending-enrollments input[name=node]').forEach(function (b) { b.checked = e.target.checked; });
    }
  });

  // --- Node page: a tool call just sent, until the node answers (or it ends unanswered).
  var call = document.getElementById('call-result');
  function callWaiting() {
    var box = call && call.firstElementChild;
    return !!call && (!box || box.getAttribute('data-state') === 'waiting');
  }
  function followCall() {
    if (!callWaiting()) { return; }
    fetchInto('/ui/nodes/' + encodeURIComponent(node) + '/calls/' +
      encodeURIComponent(call.getAttribute('data-message-id')), call);
  }

  // --- Node page: retiring asks for the node id, typed again.
  var confirmBox = document.getElementById('retire-confirm');
  var retireButton = document.getElementById('retire-button');
  function checkConfirm() {
    if (confirmBox && retireButton) {
      retireButton.disabled = confirmBox.value.trim() !== confirmBox.getAttribute('data-expect');
    }
  }
  if (confirmBox) { confirmBox.addEventListener('input', checkConfirm); checkConfirm(); }

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
    if (data.version !== undefined) { detail += 'version ' + data.version; }
    if (data.by) { detail += ' by ' + data.by; }
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

  var KINDS = ['queued', 'delivered', 'expired', 'rejected', 'dead', 'result', 'node_online',
    'node_offline', 'enrollment', 'node_revoked', 'labels_changed', 'desired_set',
    'state_reported', 'inventory_changed', 'rollout_progress', 'rollout_halted',
    'rollout_completed'];
  var ROLLOUT_PAGES = { rollouts: true, rollout: true };
  var LIVE_PAGES = { fleet: true, node: true, rollouts: true, rollout: true };
  // From the newest event the page was rendered with, then the newest one seen:
  // nothing falls in between, however often the stream is closed and opened again.
  var lastEvent = body.getAttribute('data-last-event');
  var es = null;
  function onEvent(kind, e) {
    if (e.lastEventId) { lastEvent = e.lastEventId; }
    var data;
    try { data = JSON.parse(e.data); } catch (err) { return; }
    // Rollout pages follow their rollouts' events only; the others, every other event.
    if (kind.indexOf('rollout_') === 0) {
      if (page === 'rollouts' || (page === 'rollout' && data.rollout_id === rolloutId)) { soon(); }
      return;
    }
    if (ROLLOUT_PAGES[page]) { return; }
    if (kind === 'enrollment' || kind === 'node_revoked') {
      if (page === 'fleet') { refreshPending(); }
    }
    if (page === 'node') {
      if (data.node_id !== node) { return; }
      prepend(kind, data, e.lastEventId);
      if (kind === 'node_online') { setNodeLiveness('online'); }
      if (kind === 'node_offline') { setNodeLiveness('offline'); }
      if (call && data.message_id === call.getAttribute('data-message-id')) { followCall(); }
      if (kind === 'result') {
        fetchInto('/ui/nodes/' + encodeURIComponent(node) + '/results', document.getElementById('node-results'));
      }
    }
    soon();
  }
  function openStream() {
    if (es || !window.EventSource || !LIVE_PAGES[page]) { return; }
    es = new EventSource('/ui/events' + (lastEvent ? '?after=' + encodeURIComponent(lastEvent) : ''));
    es.onopen = function () { if (live) { live.textContent = 'live'; live.className = 'live on'; } };
    es.onerror = function () {
      if (live) { live.textContent = 'reconnecting'; live.className = 'live'; }
      // Refused (the session ended: signed out elsewhere, its token revoked): the
      // browser gives up; a fetch finds out and goes to the sign-in, which says why.
      if (es && es.readyState === 2) { es = null; soon(); }
    };
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
  if (LIVE_PAGES[page]) { window.setInterval(soon, 15000); }
  checkCancel();
  applyFilter();
  followCall();
}());
