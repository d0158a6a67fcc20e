// The dashboard's few live parts. Everything shown comes from the server, either as HTML it
// rendered and escaped, or set here with textContent, never parsed as markup.
"use strict";

// Every mutating form asks first.
document.addEventListener("submit", (e) => {
  const msg = e.target.dataset.confirm;
  if (msg && !window.confirm(msg)) e.preventDefault();
});

// The first page of the jobs list polls for itself, so new jobs show up without a reload.
function liveRows() {
  const list = document.getElementById("job-list");
  if (!list || !list.dataset.live) return;
  const tick = async () => {
    try {
      const res = await fetch(list.dataset.live, { credentials: "same-origin" });
      if (res.ok) list.innerHTML = await res.text(); // server-rendered, escaped by html/template
    } catch (_) { /* the host restarting; the next tick tries again */ }
    setTimeout(tick, 1000);
  };
  setTimeout(tick, 1000);
}

liveRows();
