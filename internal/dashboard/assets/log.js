// The log viewer of a job's page. The lines come as Server-Sent Events (every line from the
// first, then each new one until the job ends) and are kept here; only the lines in view, and
// a few around them, are elements, so a 50,000-line log is a few dozen nodes and stays quick
// to scroll and search. Text is set with textContent, never parsed as markup.
"use strict";

(function () {
  const box = document.getElementById("job-log");
  if (!box) return;
  const end = document.getElementById("log-end");
  const search = document.getElementById("log-search");
  const matchesOut = document.getElementById("log-matches");
  const followBox = document.getElementById("log-follow");
  const countOut = document.getElementById("log-count");

  const OVERSCAN = 30; // lines drawn above and below the view, so a small scroll shows no gap
  const lines = []; // {s: stream, t: text}
  let lower = []; // lines' text in lower case, made as a search needs it
  let lineHeight = 0;
  let follow = true;
  let query = "";
  let matches = []; // {line, at}: every place the query is found, in order
  let current = -1; // the match in focus, an index into matches
  let drawPending = false;

  // Every line is one row of the same height (white-space: pre, no wrapping), so the line at a
  // scroll offset is a division and the whole log's height a multiplication.
  const sizer = document.createElement("div");
  sizer.className = "log-sizer";
  const win = document.createElement("div");
  win.className = "log-window";
  box.append(sizer, win);

  function measure() {
    if (lineHeight) return lineHeight;
    const probe = document.createElement("span");
    probe.className = "line";
    probe.textContent = "x";
    win.appendChild(probe);
    lineHeight = probe.getBoundingClientRect().height || 18;
    probe.remove();
    return lineHeight;
  }

  function lineElement(i) {
    const l = lines[i];
    const el = document.createElement("span");
    el.className = "line " + (l.s === "stderr" ? "stderr" : "stdout");
    el.dataset.n = String(i + 1);
    if (!query) {
      el.textContent = l.t;
      return el;
    }
    const low = lowerOf(i);
    let from = 0;
    for (let at = low.indexOf(query); at >= 0; at = low.indexOf(query, at + query.length)) {
      el.append(l.t.slice(from, at));
      const mark = document.createElement("mark");
      mark.textContent = l.t.slice(at, at + query.length);
      const m = matches[current];
      if (m && m.line === i && m.at === at) mark.className = "current";
      el.append(mark);
      from = at + query.length;
    }
    el.append(l.t.slice(from));
    return el;
  }

  function lowerOf(i) {
    let s = lower[i];
    if (s === undefined) s = lower[i] = lines[i].t.toLowerCase();
    return s;
  }

  function draw() {
    drawPending = false;
    const lh = measure();
    sizer.style.height = lines.length * lh + "px";
    if (follow) box.scrollTop = box.scrollHeight;
    const first = Math.max(0, Math.floor(box.scrollTop / lh) - OVERSCAN);
    const last = Math.min(lines.length, Math.ceil((box.scrollTop + box.clientHeight) / lh) + OVERSCAN);
    win.style.transform = "translateY(" + first * lh + "px)";
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) frag.appendChild(lineElement(i));
    win.replaceChildren(frag);
    countOut.textContent = lines.length === 1 ? "1 line" : lines.length + " lines";
  }

  function redraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(draw);
  }

  function setFollow(on) {
    follow = on;
    followBox.checked = on;
    if (on) redraw();
  }

  // Scrolling up from the end stops following; scrolling back down to it starts again.
  box.addEventListener("scroll", () => {
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - measure() / 2;
    if (atEnd !== follow) {
      follow = atEnd;
      followBox.checked = atEnd;
    }
    redraw();
  });
  followBox.addEventListener("change", () => setFollow(followBox.checked));
  document.getElementById("log-top").addEventListener("click", () => {
    setFollow(false);
    box.scrollTop = 0;
    redraw();
  });
  document.getElementById("log-bottom").addEventListener("click", () => setFollow(true));

  // Search: every match highlighted; Enter (or Next) moves to the next one, Shift+Enter (or
  // Previous) back, round the ends.
  function findIn(from) {
    for (let i = from; i < lines.length; i++) {
      const low = lowerOf(i);
      for (let at = low.indexOf(query); at >= 0; at = low.indexOf(query, at + query.length)) matches.push({ line: i, at: at });
    }
  }

  function showMatches() {
    if (!query) matchesOut.textContent = "";
    else if (!matches.length) matchesOut.textContent = "no match";
    else matchesOut.textContent = (current >= 0 ? current + 1 : 0) + " of " + matches.length;
  }

  function setQuery(q) {
    q = q.toLowerCase();
    if (q === query) return;
    query = q;
    matches = [];
    current = -1;
    if (query) findIn(0);
    showMatches();
    redraw();
  }

  function move(step) {
    setQuery(search.value);
    if (!matches.length) return;
    current = current < 0 ? (step > 0 ? 0 : matches.length - 1) : (current + step + matches.length) % matches.length;
    setFollow(false);
    const lh = measure();
    box.scrollTop = Math.max(0, matches[current].line * lh - box.clientHeight / 2);
    showMatches();
    draw(); // now, not at the next frame: the match is marked by the time the count says so
  }

  let typing = 0;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => setQuery(search.value), 150);
  });
  search.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && e.shiftKey) {
      e.preventDefault();
      move(-1);
    }
  });
  document.getElementById("log-find").addEventListener("submit", (e) => {
    e.preventDefault();
    move(1);
  });
  document.getElementById("log-prev").addEventListener("click", () => move(-1));

  function add(line) {
    const from = lines.length;
    lines.push({ s: line.stream, t: line.text });
    if (query) findIn(from);
    redraw();
  }

  const src = new EventSource(box.dataset.log);
  let opened = false;
  src.onopen = () => {
    // A reconnect streams the log again from its first line.
    if (opened) {
      lines.length = 0;
      lower = [];
      matches = [];
      current = -1;
    }
    opened = true;
  };
  src.onmessage = (e) => {
    add(JSON.parse(e.data));
    if (query) showMatches();
  };
  src.addEventListener("lines", (e) => {
    for (const l of JSON.parse(e.data)) add(l);
    if (query) showMatches();
  });
  src.addEventListener("end", (e) => {
    src.close();
    const info = JSON.parse(e.data);
    draw();
    end.textContent = info.error ? "log stopped: " + info.error : "job " + info.status + (lines.length === 0 ? "; it printed nothing" : "");
    end.dataset.status = info.status || "";
    // When the last line is on the screen: what the log viewer's speed is measured by.
    requestAnimationFrame(() => { end.dataset.shownMs = String(Math.round(performance.now())); });
    // The page was drawn while the job ran: draw it again for its result.
    if (box.dataset.final !== "true" && info.status) window.location.reload();
  });
})();
