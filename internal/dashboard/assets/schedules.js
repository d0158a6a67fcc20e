// The schedule form's next five ticks, asked of the server as the schedule is typed: the same
// parser and checks as the hosts and `host schedules add` (GET /schedules/next).
(function () {
  const input = document.getElementById("schedule-expr");
  const list = document.getElementById("next-ticks");
  const error = document.getElementById("next-error");
  if (!input || !list) return;
  let timer = null, asked = 0;
  async function show() {
    const n = ++asked;
    const expr = input.value.trim();
    if (!expr) { list.replaceChildren(); error.textContent = ""; return; }
    let body;
    try {
      const r = await fetch("/schedules/next?schedule=" + encodeURIComponent(expr));
      body = await r.json();
    } catch (e) { body = { error: "cannot ask the server: " + e }; }
    if (n !== asked) return; // a later keystroke's answer wins
    error.textContent = body.error || "";
    list.replaceChildren(...(body.ticks || []).map((t) => {
      const li = document.createElement("li");
      const d = new Date(t);
      li.textContent = d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
      li.title = d.toString();
      return li;
    }));
  }
  input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(show, 150); });
  show();
})();
