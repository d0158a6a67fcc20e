// A job's page: the times that still grow (a running job's run time, a step's wait for a
// decision) count up here, every second, from the start the server rendered (data-since),
// until the log says the job has ended (log.js then reloads the page for its record).
"use strict";

(function () {
  const live = Array.from(document.querySelectorAll("[data-since]"));
  if (live.length === 0) return;
  const end = document.getElementById("log-end");

  // dur writes a duration as the server's dur does (Go's time.Duration, rounded): whole
  // seconds here, since the page ticks once a second.
  const dur = (ms) => {
    let s = Math.max(0, Math.floor(ms / 1000));
    if (s === 0) return "0s";
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    s %= 60;
    if (h > 0) return `${h}h${m}m${s}s`;
    if (m > 0) return `${m}m${s}s`;
    return `${s}s`;
  };

  const tick = () => {
    if (end && end.dataset.status) return; // ended: the reload shows the final times
    const now = Date.now();
    for (const el of live) {
      const since = Date.parse(el.dataset.since);
      if (!Number.isNaN(since)) el.textContent = dur(now - since);
      el.dataset.ticks = String(Number(el.dataset.ticks || 0) + 1);
    }
    setTimeout(tick, 1000);
  };
  tick();
})();
