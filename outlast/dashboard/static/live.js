// Live updates without reloading: the page's event stream says something changed; the page is
// fetched again and each [data-live-region] is replaced by its new version (forms are left alone).
// A run's stream says "final" once the run is final: nothing more will change.
"use strict";
(function () {
  var url = document.body.getAttribute("data-live");
  if (!url || !window.EventSource) { return; }
  var busy = false, again = false;
  // Someone is writing in the region (a decision's comment, a resolution's result).
  function typing(region) {
    var active = document.activeElement;
    if (active && region.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) { return true; }
    return Array.prototype.some.call(region.querySelectorAll("textarea"), function (t) { return t.value !== ""; });
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live-region]").forEach(function (old) {
          var fresh = doc.getElementById(old.id);
          if (!fresh) { return; }
          if (typing(old)) { setTimeout(refresh, 3000); return; }  // later: never lose a comment
          old.replaceWith(document.importNode(fresh, true));
        });
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var source = new EventSource(url);
  // Whether Postgres pushes the changes, or the dashboard must poll (behind a pooler): said on
  // the page, in #live-mode.
  source.addEventListener("mode", function (e) {
    var where = document.getElementById("live-mode");
    if (!where) { return; }
    where.textContent = e.data === "pushed"
      ? "Live: changes are pushed by Postgres."
      : "Live: polling every second. Postgres notifications do not reach this dashboard " +
        "(behind a transaction pooler, LISTEN needs a direct connection to Postgres).";
    where.setAttribute("data-mode", e.data);
    where.hidden = false;
  });
  source.addEventListener("change", refresh);
  source.addEventListener("final", function () { source.close(); refresh(); });
})();
