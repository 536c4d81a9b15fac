(function () {
  "use strict";
  var t0 = performance.now();
  var PAGE = 100;
  var table = document.getElementById("host-table");
  var rows = table ? Array.prototype.slice.call(table.tBodies[0].rows) : [];
  var nameBox = document.getElementById("f-name");
  var statusBox = document.getElementById("f-status");
  var pager = document.getElementById("pager");
  var page = 0;

  function matching() {
    var q = nameBox ? nameBox.value.trim().toLowerCase() : "";
    var s = statusBox ? statusBox.value : "";
    return rows.filter(function (r) {
      return (!q || r.getAttribute("data-host").toLowerCase().indexOf(q) >= 0) &&
             (!s || r.getAttribute("data-status") === s);
    });
  }

  function button(label, to) {
    var b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.addEventListener("click", function () { page = to; show(); });
    return b;
  }

  function show() {
    var hits = matching();
    var pages = Math.max(1, Math.ceil(hits.length / PAGE));
    page = Math.min(page, pages - 1);
    var lo = page * PAGE, hi = lo + PAGE;
    var visible = new Set(hits.slice(lo, hi));
    rows.forEach(function (r) { r.hidden = !visible.has(r); });
    pager.textContent = hits.length ? "hosts " + (lo + 1) + "-" + Math.min(hi, hits.length) + " of " + hits.length + " " : "no host matches ";
    if (page > 0) pager.appendChild(button("previous", page - 1));
    if (page < pages - 1) pager.appendChild(button("next", page + 1));
  }

  if (rows.length > PAGE) {
    document.querySelector(".filters").hidden = false;
    nameBox.addEventListener("input", function () { page = 0; show(); });
    statusBox.addEventListener("change", function () { page = 0; show(); });
    show();
  }

  // A link to a host, a cause or a log tail opens and shows it (on the right page of the table).
  function reveal(id) {
    var el = id && document.getElementById(id);
    if (!el) return;
    if (el.tagName === "DETAILS") el.open = true;
    if (el.tagName === "TR" && el.hidden) {
      if (nameBox) nameBox.value = "";
      if (statusBox) statusBox.value = "";
      page = Math.floor(rows.indexOf(el) / PAGE);
      show();
    }
    rows.forEach(function (r) { r.classList.remove("hl"); });
    if (el.tagName === "TR") el.classList.add("hl");
    el.scrollIntoView({block: "center"});
  }
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("a[href^='#']");
    if (!a) return;
    var id = a.getAttribute("href").slice(1);
    if (document.getElementById(id)) { ev.preventDefault(); history.replaceState(null, "", "#" + id); reveal(id); }
  });
  if (location.hash) reveal(decodeURIComponent(location.hash.slice(1)));

  document.documentElement.setAttribute("data-script-ms", (performance.now() - t0).toFixed(1));
  // For bench/report_bench.py: milliseconds from navigation start to the page laid out after load.
  window.addEventListener("load", function () {
    void document.body.getBoundingClientRect();
    document.documentElement.setAttribute("data-ready-ms", performance.now().toFixed(1));
  });
})();
