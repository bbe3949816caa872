// aether-context report: draws the embedded call data as SVG plots and a table. No dependencies.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("aether-data").textContent);
  var LAYERS = D.layers;
  var COLORS = { system: "#6172f3", task: "#f79009", tools: "#98a2b3", evidence: "#12b76a", memory: "#9e77ed",
                 conversation: "#2e90fa" };
  var NS = "http://www.w3.org/2000/svg";
  var hidden = {};
  var session = "";
  var selected = null;
  var tip = document.getElementById("tip");

  function node(tag, attrs, parent, text) {
    var e = tag.indexOf("svg:") === 0 ? document.createElementNS(NS, tag.slice(4)) : document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
  function pct(x) { return (100 * x).toFixed(x > 0 && x < 0.1 ? 1 : 0) + "%"; }
  function change(sent, without) { var d = sent / without - 1; return (d > 0 ? "+" : "") + (100 * d).toFixed(0) + "%"; }
  function shown() { return D.calls.filter(function (c) { return !session || c.session === session; }); }
  function hint(target, text) {
    target.addEventListener("mousemove", function (ev) {
      tip.textContent = text; tip.style.display = "block";
      tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 430) + "px"; tip.style.top = (ev.clientY + 14) + "px";
    });
    target.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }
  function pick(target, c) { target.addEventListener("click", function () { select(c.n, true); }); }

  // A plot frame: y grid with labels, x slots for the calls; returns the scales.
  function frame(svg, calls, ymax, height, label, asShare) {
    var W = 1100, L = 64, R = 12, T = 26, B = 28, H = height;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var slot = (W - L - R) / Math.max(calls.length, 1);
    var y = function (v) { return T + (H - T - B) * (1 - v / (ymax || 1)); };
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4;
      node("svg:line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#eaecf0" }, svg);
      node("svg:text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, svg, asShare ? pct(v) : fmt(Math.round(v)));
    }
    node("svg:text", { x: 4, y: 12 }, svg, label);
    var every = Math.ceil(calls.length / 30);
    calls.forEach(function (c, i) {
      if (i % every === 0) node("svg:text", { x: L + slot * (i + 0.5), y: H - 10, "text-anchor": "middle" }, svg, c.n);
    });
    return { x: function (i) { return L + slot * i; }, slot: slot, y: y, W: W, L: L, R: R, T: T, B: B, H: H };
  }

  function drawTokens() {
    var svg = document.getElementById("tokens"), calls = shown();
    var sent = 1, win = 0;
    calls.forEach(function (c) { sent = Math.max(sent, c.tokens_sent); win = Math.max(win, c.window); });
    // The scale follows what was sent (and the window when it is near): a huge no-plugin figure must not flatten
    // the bars; circles above the scale are pinned to its top with their value.
    var windowOnScale = win > 0 && win <= 3 * sent;
    var base = windowOnScale ? Math.max(sent, win) : sent, top = base;
    calls.forEach(function (c) { if (c.tokens_without_plugin <= 2.5 * base) top = Math.max(top, c.tokens_without_plugin); });
    var ymax = top * 1.12;
    var f = frame(svg, calls, ymax, 360, "tokens per call");
    var bw = Math.max(2, f.slot * 0.64);
    calls.forEach(function (c, i) {
      var x = f.x(i) + (f.slot - bw) / 2, base = 0;
      LAYERS.forEach(function (layer) {
        var used = (c.layers[layer] || {}).used || 0;
        if (hidden[layer] || !used) return;
        var r = node("svg:rect", { x: x, width: bw, y: f.y(base + used), height: f.y(base) - f.y(base + used),
                                   fill: COLORS[layer], "class": "bar" + (selected === c.n ? " sel" : "") }, svg);
        hint(r, "call " + c.n + " · " + layer + ": " + fmt(used) + " of " + fmt((c.layers[layer] || {}).budget) + " budget");
        pick(r, c);
        base += used;
      });
      var cx = f.x(i) + f.slot / 2, over = c.tokens_without_plugin > ymax;
      var cy = over ? f.T + 4 : f.y(c.tokens_without_plugin);
      var d = node("svg:circle", { cx: cx, cy: cy, r: 3.5, fill: over ? "#b42318" : "#fff", stroke: "#b42318",
                                   "stroke-width": 1.6, "class": "hit" }, svg);
      var right = i > calls.length / 2;
      if (over) node("svg:text", { x: right ? cx - 7 : cx + 7, y: cy + 4, fill: "#b42318", "text-anchor": right ? "end" : "start" },
                     svg, "↑ " + fmt(c.tokens_without_plugin));
      hint(d, "call " + c.n + " · without the plugin ADK would have sent " + fmt(c.tokens_without_plugin) +
           " tokens; sent " + fmt(c.tokens_sent));
      pick(d, c);
      var marks = c.truncations.length + (c.compaction ? 1 : 0) + (c.cache_break ? 1 : 0);
      if (marks) {
        var text = [];
        if (c.compaction) text.push("compaction: " + (c.compaction.reason || JSON.stringify(c.compaction)));
        if (c.cache_break) text.push("cache break at " + c.cache_break.block + " (" + (c.cache_break.cause || c.cache_break.kind || "") +
                                     ", " + fmt(c.cache_break.tokens) + " tokens re-processed)");
        c.truncations.forEach(function (t) { text.push("• " + t.explained); });
        var color = c.compaction ? "#b42318" : c.cache_break ? "#f79009" : "#475467";
        var m = node("svg:path", { d: "M" + (cx - 5) + " " + (f.T - 14) + " h10 l-5 8 z", fill: color, "class": "hit" }, svg);
        hint(m, "call " + c.n + "\n" + text.join("\n"));
        pick(m, c);
      }
    });
    if (windowOnScale) {
      var pts = calls.map(function (c, i) { return (f.x(i) + 2) + "," + f.y(c.window) + " " + (f.x(i + 1) - 2) + "," + f.y(c.window); });
      node("svg:polyline", { points: pts.join(" "), fill: "none", stroke: "#101828", "stroke-dasharray": "5 4" }, svg);
    }
    var pts2 = calls.map(function (c, i) { return (f.x(i) + f.slot / 2) + "," + f.y(Math.min(c.tokens_without_plugin, ymax)); });
    node("svg:polyline", { points: pts2.join(" "), fill: "none", stroke: "#b42318", "stroke-width": 1, opacity: 0.5 }, svg);
    var notes = [];
    if (!windowOnScale && win) notes.push("The window (" + fmt(win) + " tokens) is off this scale; every call is far below it.");
    if (calls.some(function (c) { return c.tokens_without_plugin > ymax; }))
      notes.push("Filled circles at the top: without the plugin the call would have been larger than this scale (value beside it).");
    document.getElementById("window-note").textContent = notes.join(" ");
  }

  function drawCache() {
    var svg = document.getElementById("cache"), calls = shown();
    var f = frame(svg, calls, 1, 200, "share of the prompt", true);
    var bw = Math.max(2, f.slot * 0.5);
    calls.forEach(function (c, i) {
      var share = c.tokens_sent ? Math.min(1, c.prefix_tokens / c.tokens_sent) : 0;
      var r = node("svg:rect", { x: f.x(i) + (f.slot - bw) / 2, width: bw, y: f.y(share), height: f.y(0) - f.y(share),
                                 fill: "#84caff", "class": "bar" }, svg);
      hint(r, "call " + c.n + " · " + fmt(c.prefix_tokens) + " leading tokens equal to the previous call (" + pct(share) +
           ")" + (c.reused_payload ? "\npayload reused" : "") + (c.cache_break ? "\ncache break at " + c.cache_break.block : ""));
      pick(r, c);
      if (c.reported) {
        var s = c.cached / c.reported;
        var dot = node("svg:circle", { cx: f.x(i) + f.slot / 2, cy: f.y(s), r: 4, fill: "#039855", "class": "hit" }, svg);
        hint(dot, "call " + c.n + " · model reported " + fmt(c.cached) + " of " + fmt(c.reported) + " prompt tokens cached (" + pct(s) + ")");
        pick(dot, c);
      }
    });
  }

  function drawFailures() {
    var svg = document.getElementById("failures"), calls = shown();
    var top = 4;  // whole numbers on the axis
    calls.forEach(function (c) { top = Math.max(top, Math.ceil(c.failures / 4) * 4); });
    var f = frame(svg, calls, top, 170, "tool failures recorded in the session");
    var bw = Math.max(2, f.slot * 0.5);
    calls.forEach(function (c, i) {
      var x = f.x(i) + (f.slot - bw) / 2;
      if (c.failures) {
        var r = node("svg:rect", { x: x, width: bw, y: f.y(c.failures), height: f.y(0) - f.y(c.failures), fill: "#fda29b", "class": "bar" }, svg);
        hint(r, "call " + c.n + " · " + c.failures + " tool failure(s) recorded so far");
        pick(r, c);
      }
      if (c.error) {
        var m = node("svg:text", { x: f.x(i) + f.slot / 2, y: f.T - 6, "text-anchor": "middle", fill: "#b42318", "class": "hit" }, svg, "✕");
        hint(m, "call " + c.n + " · packing failed, the original request was sent:\n" + c.error);
        pick(m, c);
      }
    });
  }

  function cell(tr, text, cls) { return node("td", cls ? { "class": cls } : {}, tr, text); }

  function inspect(c, td) {
    node("div", {}, td).appendChild(document.createTextNode(
      "pack " + c.pack_id + " · model " + c.model + " · profile " + c.profile + " · window " + fmt(c.window) +
      " · packed for " + fmt(c.packed_for) + " of our tokens (calibration " + c.calibration.toFixed(2) + ": the model counts " +
      c.calibration.toFixed(2) + "× our estimate)"));
    node("div", {}, td, "sent " + fmt(c.tokens_sent) + " tokens; without the plugin " + fmt(c.tokens_without_plugin) +
         "; prefix equal to the previous call " + fmt(c.prefix_tokens) + (c.reported ? "; model reported " + fmt(c.reported) +
         " prompt tokens, " + fmt(c.cached) + " cached" : ""));
    if (c.error) node("div", { "class": "err" }, td, "packing failed, original request sent: " + c.error);
    var t = node("table", {}, td), h = node("tr", {}, node("thead", {}, t));
    ["layer", "budget", "used", "items", "dropped"].forEach(function (k) { node("th", {}, h, k); });
    var body = node("tbody", {}, t);
    var order = LAYERS.concat(Object.keys(c.layers).filter(function (k) { return LAYERS.indexOf(k) < 0; }));
    order.filter(function (k) { return c.layers[k]; }).forEach(function (k) {
      var u = c.layers[k], tr = node("tr", {}, body);
      [k, fmt(u.budget), fmt(u.used), u.items, u.dropped].forEach(function (v) { cell(tr, String(v)); });
    });
    if (c.compaction) {
      var k = c.compaction;
      node("div", {}, td, "compaction" + (k.count ? " #" + k.count : "") + ": " + (k.reason || "") +
           (k.folded_turns !== undefined ? "; " + k.folded_turns + " turns left the verbatim history" : "") +
           (k.tokens_before !== undefined ? " (" + fmt(k.tokens_before) + " → " + fmt(k.tokens_after) + " tokens)" : ""));
    }
    if (c.cache_break) node("div", {}, td, "cache break: " + c.cache_break.block + " (" + (c.cache_break.cause || c.cache_break.kind || "") + ", " +
                              fmt(c.cache_break.tokens) + " tokens re-processed)");
    if (c.truncations.length) {
      node("div", {}, td, "truncations:");
      var ul = node("ul", {}, td);
      c.truncations.forEach(function (x) { node("li", {}, ul, x.explained); });
    }
    if (c.flags.length) node("div", {}, td, "flags: " + c.flags.join("; "));
    var u = node("div", {}, td, "manifest ");
    node("code", {}, u, c.uri);
  }

  function drawTable() {
    var body = document.getElementById("rows");
    while (body.firstChild) body.removeChild(body.firstChild);
    shown().forEach(function (c) {
      var tr = node("tr", { "class": "call" + (selected === c.n ? " open" : ""), id: "call-" + c.n }, body);
      node("a", { href: "#call-" + c.n }, cell(tr, ""), String(c.n));
      cell(tr, new Date(c.created_at * 1000).toISOString().slice(11, 19));
      cell(tr, c.session.slice(0, 10));
      cell(tr, c.agent);
      cell(tr, fmt(c.tokens_sent));
      cell(tr, fmt(c.tokens_without_plugin));
      cell(tr, c.tokens_without_plugin ? change(c.tokens_sent, c.tokens_without_plugin) : "–");
      cell(tr, fmt(c.window));
      cell(tr, String(c.truncations.length));
      cell(tr, c.compaction ? "yes" : "");
      cell(tr, fmt(c.prefix_tokens));
      cell(tr, c.reported ? fmt(c.cached) + " / " + fmt(c.reported) : "–");
      cell(tr, String(c.failures), c.error ? "err" : "");
      tr.addEventListener("click", function (ev) { ev.preventDefault(); select(c.n, false); });
      if (selected === c.n) inspect(c, node("td", { colspan: 13 }, node("tr", { "class": "detail" }, body)));
    });
  }

  function select(n, scroll, keep) {
    selected = selected === n && !keep ? null : n;
    drawAll();
    if (selected !== null && history.replaceState) history.replaceState(null, "", "#call-" + selected);
    var row = document.getElementById("call-" + n);
    if (scroll && row && selected !== null) row.scrollIntoView({ block: "center" });
  }

  function legend() {
    var box = document.getElementById("legend");
    LAYERS.forEach(function (layer) {
      var lab = node("label", {}, box), cb = node("input", { type: "checkbox", checked: "checked" }, lab);
      node("span", { "class": "sw", style: "background:" + COLORS[layer] }, lab);
      lab.appendChild(document.createTextNode(layer));
      cb.addEventListener("change", function () { hidden[layer] = !cb.checked; drawTokens(); });
    });
    var other = node("span", {}, box);
    other.textContent = "○ without the plugin   ▼ truncation / compaction / cache break   - - window";
    var sel = document.getElementById("session");
    D.sessions.forEach(function (s) { node("option", { value: s }, sel, s); });
    sel.addEventListener("change", function () { session = sel.value; selected = null; drawAll(); });
  }

  function drawAll() { drawTokens(); drawCache(); drawFailures(); drawTable(); }

  legend();
  drawAll();
  var linked = /^#call-(\d+)$/.exec(location.hash);  // report.html#call-7 opens call 7
  if (linked) select(Number(linked[1]), true, true);
  document.body.setAttribute("data-rendered", String(D.calls.length));
})();
