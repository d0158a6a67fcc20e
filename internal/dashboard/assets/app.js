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

// A job's log streams in as Server-Sent Events until the job ends.
function liveLog() {
  const pre = document.getElementById("job-log");
  if (!pre) return;
  const end = document.getElementById("log-end");
  const src = new EventSource(pre.dataset.log);
  src.onmessage = (e) => {
    const line = JSON.parse(e.data);
    const span = document.createElement("span");
    span.className = line.stream;
    span.textContent = line.text + "\n";
    pre.appendChild(span);
  };
  src.addEventListener("end", (e) => {
    src.close();
    const info = JSON.parse(e.data);
    end.textContent = info.error ? "log stopped: " + info.error : "job " + info.status;
    end.dataset.status = info.status || "";
    // The page was drawn while the job ran: draw it again for its result.
    if (pre.dataset.final !== "true" && info.status) window.location.reload();
  });
}

liveRows();
liveLog();
