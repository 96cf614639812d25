// relaunch dashboard live updates (progressive enhancement: pages read fine without it).
// A page whose <main> has data-live-ms is re-fetched with ?fragment=1 every that many
// milliseconds while the tab is visible; the server answers with the page's content
// only (already escaped HTML from the same templates), which replaces <main>'s content.
(function () {
  "use strict";
  var main = document.getElementById("content");
  if (!main || !window.fetch) { return; }
  var status = document.getElementById("live-status");
  var timer = null;

  function fragmentUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    return url.toString();
  }

  function schedule() {
    var ms = parseInt(main.getAttribute("data-live-ms") || "0", 10);
    if (timer) { clearTimeout(timer); timer = null; }
    if (ms > 0) { timer = setTimeout(refresh, ms); }
    else if (status) { status.textContent = ""; }
  }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    fetch(fragmentUrl(), { headers: { "X-Relaunch-Fragment": "1" }, credentials: "same-origin" })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        var live = resp.headers.get("X-Relaunch-Live");
        return resp.text().then(function (html) { return { html: html, live: live }; });
      })
      .then(function (r) {
        // Keep open <details> open across refreshes.
        var open = [];
        main.querySelectorAll("details[open] > summary").forEach(function (s) { open.push(s.textContent); });
        if (main.innerHTML !== r.html) { main.innerHTML = r.html; }
        main.querySelectorAll("details > summary").forEach(function (s) {
          if (open.indexOf(s.textContent) >= 0) { s.parentNode.setAttribute("open", ""); }
        });
        if (r.live !== null) { main.setAttribute("data-live-ms", r.live); }
        if (status) { status.textContent = "live · updated " + new Date().toISOString().slice(11, 19) + " UTC"; }
        schedule();
      })
      .catch(function (err) {
        if (status) { status.textContent = "live updates paused (" + err.message + ")"; }
        schedule();
      });
  }

  document.addEventListener("visibilitychange", function () { if (!document.hidden) { refresh(); } });
  if (main.getAttribute("data-live-ms")) {
    if (status) { status.textContent = "live"; }
    schedule();
  }
})();
