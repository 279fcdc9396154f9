// The page updates itself: the server says when thatch's state changed (server-sent
// events on /live), and the page fetches its main part again, unless the person is
// typing in a form or has a details element open.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var badge = document.getElementById("live");
  if (!main || !window.EventSource) { return; }
  var busy = false, again = false;
  function set(state, text) { if (badge) { badge.className = "live " + state; badge.textContent = text; } }
  function editing() {
    var a = document.activeElement;
    if (a && main.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) { return true; }
    return main.querySelector("details[open]") !== null;
  }
  function refresh() {
    if (busy) { again = true; return; }
    if (editing()) { set("paused", "paused while you edit"); again = true; return; }
    busy = true;
    fetch(location.href, { headers: { "X-Partial": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        // Signed out (here or in another tab) or expired: show the page that says so.
        if (r.status === 401) { location.reload(); }
        if (!r.ok) { throw new Error(r.status); }
        return r.text();
      })
      .then(function (html) { if (main.innerHTML !== html) { main.innerHTML = html; } set("on", "live"); })
      .catch(function () { set("off", "offline"); })
      .then(function () { busy = false; if (again) { again = false; setTimeout(refresh, 250); } });
  }
  document.addEventListener("focusout", function () { if (again) { setTimeout(refresh, 250); } });
  var es = new EventSource("/live");
  es.addEventListener("hello", function () { set("on", "live"); });
  es.addEventListener("change", refresh);
  es.onerror = function () {
    set("off", "reconnecting…");
    // A stream the browser gave up on (the session ended: /live answered 401): ask the
    // page itself, which reloads on a 401.
    if (es.readyState === EventSource.CLOSED) { refresh(); }
  };
})();
