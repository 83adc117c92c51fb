// Live updates without reloading: the page's event stream says something changed; the page is
// fetched again and each [data-live-region] is replaced by its new version (forms are left alone).
// A run's stream says "final" once the run is final: nothing more will change.
"use strict";
(function () {
  var url = document.body.getAttribute("data-live");
  if (!url || !window.EventSource) { return; }
  var busy = false, again = false;
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
          if (fresh) { old.replaceWith(document.importNode(fresh, true)); }
        });
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var source = new EventSource(url);
  source.addEventListener("change", refresh);
  source.addEventListener("final", function () { source.close(); refresh(); });
})();
