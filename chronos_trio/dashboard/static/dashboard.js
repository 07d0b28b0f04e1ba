// chronos_trio dashboard: live counts over server-sent events.
// Served from the dashboard itself (the CSP allows no inline script);
// writes only text (textContent), never markup.
(function () {
  "use strict";
  var source = document.body.getAttribute("data-events");
  var live = document.getElementById("live");
  if (!source || !window.EventSource) { return; }
  var events = new EventSource(source);
  function cells() {
    return document.querySelectorAll("[data-queue]");
  }
  events.addEventListener("counts", function (e) {
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
