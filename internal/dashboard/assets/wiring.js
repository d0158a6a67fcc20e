// The wiring graph, laid out by dagre (vendored as dagre.min.js) and drawn as SVG. The graph
// comes from the host (GET /wiring.json, the same package as `host wiring`); every name in
// it is set with textContent or as an attribute, never parsed as markup. On a flow's page the
// SVG also carries each function's status in that flow, and the wires its jobs went along.
"use strict";

(function () {
  const svg = document.getElementById("wiring");
  if (!svg) return;
  const NS = "http://www.w3.org/2000/svg";
  const note = document.getElementById("wiring-note");
  if (typeof dagre === "undefined") {
    if (note) note.textContent = "The graph could not be drawn: its layout library (/assets/dagre.min.js) did not load; the table below has every wire.";
    return;
  }

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function text(parent, cls, s, x, y) {
    const t = el("text", { class: cls, x: x, y: y, "text-anchor": "middle", "dominant-baseline": "central" }, parent);
    t.textContent = s;
    return t;
  }

  // Boxes are sized to their text, which only the browser can measure.
  const ruler = el("g", { class: "ruler" }, svg);
  function measure(cls, s) {
    const t = text(ruler, cls, s, 0, 0);
    const w = t.getComputedTextLength();
    ruler.removeChild(t);
    return w;
  }

  function parse(attr) {
    try { return JSON.parse(svg.dataset[attr] || "{}"); } catch (_) { return {}; }
  }

  // Smooth through dagre's points: a quadratic curve to each midpoint, the corners as controls.
  function curve(pts) {
    let d = "M" + pts[0].x + " " + pts[0].y;
    for (let i = 1; i < pts.length - 1; i++) {
      const mx = (pts[i].x + pts[i + 1].x) / 2, my = (pts[i].y + pts[i + 1].y) / 2;
      d += " Q" + pts[i].x + " " + pts[i].y + " " + mx + " " + my;
    }
    const last = pts[pts.length - 1];
    return d + " L" + last.x + " " + last.y;
  }

  // loopRise is how far above its box the k-th self-loop of a node reaches.
  function loopRise(k) { return k ? 30 + 18 * k : 0; }

  function draw(graph) {
    const status = parse("status");
    const taken = new Set(parse("taken").pairs || []);
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: "LR", nodesep: 28, ranksep: 70, edgesep: 14, marginx: 20, marginy: 56 });
    g.setDefaultEdgeLabel(() => ({}));
    // dagre routes a self-loop oddly; those are drawn here, as arcs over their box, in room
    // reserved by laying the box out taller (both ways: dagre centres it).
    const loops = graph.edges.filter((e) => e.from === e.to);
    const loopCount = {};
    for (const e of loops) loopCount[e.from] = (loopCount[e.from] || 0) + 1;
    for (const n of graph.nodes) {
      const w = Math.max(measure("name", n.label), n.note ? measure("note", n.note) : 0);
      const h = n.note ? 44 : 30;
      const k = loopCount[n.id] || 0;
      const lw = Math.max(0, ...loops.filter((e) => e.from === n.id && e.label).map((e) => measure("label", e.label) + 8));
      g.setNode(n.id, { node: n, width: Math.max(w + 28, lw), height: h + 2 * loopRise(k), bw: w + 28, box: h });
    }
    graph.edges.forEach((e, i) => {
      if (e.from === e.to) return;
      const lw = e.label ? measure("label", e.label) + 8 : 0;
      g.setEdge(e.from, e.to, { edge: e, width: lw, height: e.label ? 18 : 0, labelpos: "c" }, "e" + i);
    });
    dagre.layout(g);
    const size = g.graph();
    svg.setAttribute("width", Math.ceil(size.width));
    svg.setAttribute("height", Math.ceil(size.height));
    svg.setAttribute("viewBox", "0 0 " + Math.ceil(size.width) + " " + Math.ceil(size.height));

    const defs = el("defs", {}, svg);
    for (const id of ["arrow", "arrow-cycle", "arrow-taken"]) {
      const m = el("marker", { id: id, class: id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, defs);
      el("path", { d: "M0 0 L10 5 L0 10 z" }, m);
    }
    const wires = el("g", { class: "wires" }, svg);
    const boxes = el("g", { class: "nodes" }, svg);

    function wire(e, d, lx, ly) {
      const on = taken.has(e.from + ">" + e.to);
      const cls = "wire kind-" + e.kind + (e.cycle ? " cycle" : "") + (on ? " taken" : "");
      const w = el("g", { class: cls, "data-from": e.from, "data-to": e.to, "data-kind": e.kind }, wires);
      el("title", {}, w).textContent = (e.subject || "") + (e.label ? " · " + e.label : "") + (e.cycle ? " · in a cycle" : "");
      el("path", { class: "line", d: d, "marker-end": "url(#" + (on ? "arrow-taken" : e.cycle ? "arrow-cycle" : "arrow") + ")" }, w);
      if (e.label) {
        const lw = measure("label", e.label) + 8;
        el("rect", { class: "label-bg", x: lx - lw / 2, y: ly - 9, width: lw, height: 18, rx: 3 }, w);
        text(w, "label", e.label, lx, ly);
      }
    }

    // dagre ends a line on the box it laid out, which a self-loop's room makes bigger than
    // the box drawn: end it on the drawn one.
    function clip(n, toward) {
      const dx = toward.x - n.x, dy = toward.y - n.y;
      if (!dx && !dy) return { x: n.x, y: n.y };
      const k = Math.min(dx ? n.bw / 2 / Math.abs(dx) : Infinity, dy ? n.box / 2 / Math.abs(dy) : Infinity);
      return { x: n.x + dx * k, y: n.y + dy * k };
    }
    for (const ref of g.edges()) {
      const lay = g.edge(ref), pts = lay.points.slice();
      pts[0] = clip(g.node(ref.v), pts[1]);
      pts[pts.length - 1] = clip(g.node(ref.w), pts[pts.length - 2]);
      wire(lay.edge, curve(pts), lay.x, lay.y);
    }
    const perNode = {};
    for (const e of loops) {
      const n = g.node(e.from);
      const k = perNode[e.from] = (perNode[e.from] || 0) + 1;
      const top = n.y - n.box / 2, rise = loopRise(k) - 6;
      const d = "M" + (n.x - 12) + " " + top + " C" + (n.x - 40) + " " + (top - rise) + " " + (n.x + 40) + " " + (top - rise) + " " + (n.x + 12) + " " + top;
      wire(e, d, n.x, top - rise * 0.75);
    }

    for (const id of g.nodes()) {
      const lay = g.node(id), n = lay.node;
      let cls = "node kind-" + n.kind;
      const st = status[n.id];
      if (Object.keys(status).length && n.kind === "function") cls += st ? " status-" + st.status : " not-run";
      const box = el("g", { class: cls, "data-node": n.id }, boxes);
      let parent = box;
      if (n.kind === "function") parent = el("a", { href: "/jobs?function=" + encodeURIComponent(n.id) }, box);
      el("title", {}, parent).textContent = n.label + (st ? ": " + st.jobs : "");
      const bw = lay.bw;
      el("rect", { x: lay.x - bw / 2, y: lay.y - lay.box / 2, width: bw, height: lay.box, rx: n.kind === "function" ? 5 : 14 }, parent);
      if (n.note) {
        text(parent, "name", n.label, lay.x, lay.y - 8);
        text(parent, "note", n.note, lay.x, lay.y + 10);
      } else {
        text(parent, "name", n.label, lay.x, lay.y);
      }
    }
    svg.removeChild(ruler);
    svg.dataset.drawn = String(graph.nodes.length);
    if (note && !graph.nodes.length) note.textContent = "No functions to draw.";
  }

  fetch(svg.dataset.graph, { credentials: "same-origin" })
    .then((res) => { if (!res.ok) throw new Error("GET " + svg.dataset.graph + ": " + res.status); return res.json(); })
    .then(draw)
    .catch((err) => { if (note) note.textContent = "The graph could not be drawn: " + err.message; });
})();
