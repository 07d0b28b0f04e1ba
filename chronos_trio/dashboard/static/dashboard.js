// chronos_trio dashboard: live counts over server-sent events, and every
// other table of the page read again as they arrive.
// Served from the dashboard itself (the CSP allows no inline script);
// writes only text (textContent), never markup.
(function () {
  "use strict";
  // Times: the server writes UTC (and relative) in <time datetime=...>; the
  // browser's local time goes beside each (without script, UTC still shows).
  function localTimes(root) {
    var tags = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < tags.length; i++) {
      var t = tags[i];
      if (t.getAttribute("data-local")) { continue; }
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) { continue; }
      var span = document.createElement("span");
      span.className = "local";
      span.textContent = " · " + d.toLocaleString(undefined, {
        year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
        minute: "2-digit", second: "2-digit", timeZoneName: "short"
      });
      t.setAttribute("data-local", "1");
      t.parentNode.insertBefore(span, t.nextSibling);
    }
  }
  localTimes(document);
  // Charts: their fragment (server-rendered SVG, our own escaped HTML) is
  // reloaded with the live updates, at most every CHART_EVERY ms.
  var CHART_EVERY = 15000;
  var chartsAt = Date.now();
  var loading = false;
  function reloadCharts() {
    var section = document.getElementById("charts");
    if (!section || loading || !window.fetch || !window.DOMParser) { return; }
    if (Date.now() - chartsAt < CHART_EVERY) { return; }
    var url = section.getAttribute("data-charts");
    if (!url) { return; }
    loading = true;
    chartsAt = Date.now();
    fetch(url, { credentials: "same-origin", headers: { "accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        loading = false;
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("charts");
        if (!fresh) { return; }
        // keep open data tables open
        var open = {};
        var was = section.querySelectorAll("[data-history] details[open]");
        for (var i = 0; i < was.length; i++) {
          open[was[i].parentNode.getAttribute("data-history")] = true;
        }
        var node = document.importNode(fresh, true);
        var now = node.querySelectorAll("[data-history]");
        for (var j = 0; j < now.length; j++) {
          var det = now[j].querySelector("details");
          if (det && open[now[j].getAttribute("data-history")]) { det.setAttribute("open", ""); }
        }
        section.parentNode.replaceChild(node, section);
        localTimes(node);
      }, function () { loading = false; });
  }
  var source = document.body.getAttribute("data-events");
  var live = document.getElementById("live");
  if (!source || !window.EventSource) { return; }
  var events = new EventSource(source);
  function cells() {
    return document.querySelectorAll("[data-queue]");
  }
  // Every other table of the page (marked data-live, with an id): read the
  // page again, at most every data-live-every ms, while it is visible, and
  // put in each table the server's fresh rendering of it (the same escaped
  // markup a reload would show; DOMParser runs no script). A region holding
  // the keyboard focus is left alone, so nobody loses their place.
  var every = Number(document.body.getAttribute("data-live-every")) || 5000;
  var lastRead = Date.now();
  var reading = false;
  function readTables() {
    var regions = document.querySelectorAll("[data-live][id]");
    if (!regions.length || reading || document.hidden || Date.now() - lastRead < every) { return; }
    reading = true;
    lastRead = Date.now();
    fetch(window.location.href, { credentials: "same-origin", headers: { "accept": "text/html", "x-chronos-live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html");
        for (var i = 0; i < regions.length; i++) {
          var el = regions[i];
          var next = fresh.getElementById(el.id);
          if (!next || el.contains(document.activeElement)) { continue; }
          var nodes = [];
          for (var k = 0; k < next.childNodes.length; k++) {
            nodes.push(document.importNode(next.childNodes[k], true));
          }
          el.replaceChildren.apply(el, nodes);
        }
        document.body.setAttribute("data-live-read", String(Date.now()));
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { reading = false; });
  }
  events.addEventListener("counts", function (e) {
    readTables();
    var data = JSON.parse(e.data);
    var all = cells();
    for (var i = 0; i < all.length; i++) {
      var el = all[i];
      var q = data.queues[el.getAttribute("data-queue")];
      if (!q) { continue; }
      var state = el.getAttribute("data-state");
      var field = el.getAttribute("data-field");
      if (state !== null && q.counts[state] !== undefined) {
        el.textContent = String(q.counts[state]);
      } else if (field === "total") {
        el.textContent = String(q.total);
      } else if (field === "status") {
        el.textContent = q.paused ? "paused" : "active";
        el.className = "badge " + (q.paused ? "paused" : "active");
      }
    }
    if (live) { live.textContent = "live · store time " + data.at; live.className = "live on"; }
    reloadCharts();
  });
  // a job's page: its live progress bar, state and log lines
  events.addEventListener("notes", function (e) {
    var data = JSON.parse(e.data);
    var state = document.getElementById("job-state");
    if (data.gone) {
      if (state) { state.textContent = "gone"; state.className = "badge"; }
      return;
    }
    if (state) { state.textContent = data.state; state.className = "badge state-" + data.state; }
    var bar = document.getElementById("job-progress");
    var text = document.getElementById("job-progress-text");
    var p = data.progress;
    if (bar && p) { bar.value = p.fraction; }
    if (text && p) {
      text.textContent = Math.round(p.fraction * 100) + "%" + (p.message ? " " + p.message : "") +
        " (attempt " + p.attempt + ", " + p.at + ")";
    }
    var log = document.getElementById("job-log");
    if (log && data.lines) { log.textContent = data.lines.length ? data.lines.join("\n") + "\n" : ""; }
    var dropped = document.getElementById("job-log-dropped");
    if (dropped) { dropped.textContent = data.dropped ? data.dropped + " older lines dropped" : ""; }
  });
  events.addEventListener("error", function (e) {
    if (live && !e.data) { live.textContent = "reconnecting…"; live.className = "live off"; }
    if (live && e.data) { live.textContent = "store unreachable"; live.className = "live off"; }
  });
})();
