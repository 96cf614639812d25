// relaunch dashboard: follow a running cycle's log (progressive enhancement).
// A <pre id="log" data-tail-url data-offset data-next-line> asks its tail URL for the
// complete lines written after the byte offset every 2 s and appends them; the server
// answers at most 64 KiB at a time and says whether the log is still being written
// ("live"). The page keeps the last MAX_LINES lines.
(function () {
  "use strict";
  var pre = document.getElementById("log");
  if (!pre || !pre.getAttribute("data-tail-url") || !window.fetch) { return; }
  var url = pre.getAttribute("data-tail-url");
  var offset = parseInt(pre.getAttribute("data-offset") || "0", 10);
  var next = parseInt(pre.getAttribute("data-next-line") || "1", 10);
  var status = document.getElementById("follow-status");
  var MAX_LINES = 5000;
  var PERIOD_MS = 2000;

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  }

  function append(lines) {
    var stick = atBottom();
    var frag = document.createDocumentFragment();
    lines.forEach(function (text) {
      var line = document.createElement("span");
      line.className = "line";
      line.id = "L" + next;
      var ln = document.createElement("span");
      ln.className = "ln";
      ln.textContent = String(next);
      line.appendChild(ln);
      line.appendChild(document.createTextNode(text + "\n"));
      frag.appendChild(line);
      next += 1;
    });
    pre.appendChild(frag);
    while (pre.childNodes.length > MAX_LINES) { pre.removeChild(pre.firstChild); }
    if (stick) { window.scrollTo(0, document.body.scrollHeight); }
  }

  function poll() {
    fetch(url + "?offset=" + offset, { credentials: "same-origin", cache: "no-store" })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.json();
      })
      .then(function (data) {
        if (data.reset) { window.location.reload(); return; }
        if (data.lines && data.lines.length) { append(data.lines); }
        offset = data.next_offset;
        pre.setAttribute("data-offset", String(offset));
        if (data.live) {
          if (status) { status.textContent = "Following · " + (next - 1) + " lines · updated " + new Date().toISOString().slice(11, 19) + " UTC"; }
          setTimeout(poll, data.more ? 50 : PERIOD_MS);
        } else if (status) {
          status.textContent = "The cycle has ended; this is the end of its log (" + (next - 1) + " lines).";
        }
      })
      .catch(function (err) {
        if (status) { status.textContent = "Following paused (" + err.message + "); retrying."; }
        setTimeout(poll, PERIOD_MS * 3);
      });
  }
  setTimeout(poll, PERIOD_MS);
})();
