// The editor on a function's page (editor.html): CodeMirror (editor.min.js) on the entry's
// source; the draft checked by the host as it is typed (POST check, debounced), its problems
// marked in the gutter and listed as file:line message; Test run (POST test, its log and
// outcome streamed as JSON lines) with the run form's arguments; Deploy (POST deploy).
// Everything shown is set with textContent, never parsed as markup.
"use strict";

(function () {
  const root = document.getElementById("editor");
  if (!root || !window.HostEditor) return;
  const fn = root.dataset.function;
  const isNew = root.hasAttribute("data-new");
  const base = "/functions/" + encodeURIComponent(fn);
  const status = document.getElementById("editor-status");
  const list = document.getElementById("editor-problems");
  const said = document.getElementById("editor-said");
  const failure = document.getElementById("editor-error");
  const form = document.getElementById("run-form");
  if (isNew) {
    // The form's Run runs what is served; a new function is not served yet.
    for (const id of ["run-button", "run-wait"]) {
      const b = document.getElementById(id);
      if (b) b.hidden = true;
    }
  }

  let checked = 0; // the number of the latest check sent: older answers are dropped
  let timer = null;
  const editor = window.HostEditor.create(document.getElementById("editor-code"), {
    doc: document.getElementById("editor-source").value,
    lang: root.dataset.lang,
    onChange: () => {
      clearTimeout(timer);
      status.textContent = "checking…";
      status.className = "note";
      timer = setTimeout(check, 400);
    },
  });
  root.editor = editor; // for the tests

  // body is the draft, the run form's fields and extra, as a form post.
  const body = (extra) => {
    const b = form ? new URLSearchParams(new FormData(form)) : new URLSearchParams();
    b.set("source", editor.value());
    b.set("lang", root.dataset.lang);
    for (const [k, v] of Object.entries(extra || {})) b.set(k, v);
    return b;
  };
  const post = (what, extra) => fetch(base + "/" + what, { method: "POST", body: body(extra), credentials: "same-origin", headers: { Accept: "application/json" } });

  function show(problems) {
    editor.mark(problems);
    list.textContent = "";
    for (const p of problems) {
      const li = document.createElement("li");
      li.textContent = p.line ? `${p.file}:${p.line} ${p.message}` : `${p.file} ${p.message}`;
      li.dataset.line = p.line;
      li.addEventListener("click", () => editor.goTo(p.line || 1));
      list.appendChild(li);
    }
    status.textContent = problems.length ? `${problems.length} problem${problems.length > 1 ? "s" : ""}: the check refuses it` : "the check passes";
    status.className = problems.length ? "bad" : "ok";
    root.dataset.problems = problems.length;
  }

  async function check() {
    const n = ++checked;
    try {
      const res = await post("check");
      const data = await res.json().catch(() => ({ error: "the host answered " + res.status }));
      if (n !== checked) return;
      if (!res.ok) {
        status.textContent = data.error || "the host answered " + res.status;
        status.className = "bad";
        return;
      }
      show(data.problems);
    } catch (err) {
      if (n === checked) status.textContent = "not checked: " + err.message;
    }
  }

  const buttons = () => root.querySelectorAll("button");
  const busy = (on) => { for (const b of buttons()) b.disabled = on; };

  // refused shows a refusal: its problems when it has some, its message always.
  function refused(data, code) {
    failure.textContent = data.error || "the host answered " + code;
    if (data.problems) show(data.problems);
  }

  const out = document.getElementById("draft-out");
  const log = document.getElementById("draft-log");
  const dStatus = document.getElementById("draft-status");
  const dTime = document.getElementById("draft-time");
  const result = document.getElementById("draft-result");
  const resultHead = document.getElementById("draft-result-head");
  const dError = document.getElementById("draft-error");

  async function testRun() {
    failure.textContent = said.textContent = "";
    busy(true);
    try {
      const res = await post("test");
      if (!res.ok) {
        refused(await res.json().catch(() => ({})), res.status);
        return;
      }
      out.hidden = false;
      delete out.dataset.status;
      log.textContent = dTime.textContent = "";
      result.hidden = resultHead.hidden = dError.hidden = true;
      dStatus.textContent = "running";
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line) take(JSON.parse(line));
        }
      }
    } catch (err) {
      failure.textContent = "the test run was cut off: " + err.message;
    } finally {
      busy(false);
    }
  }

  function take(m) {
    if (m.log) {
      const span = document.createElement("span");
      span.className = m.log.stream;
      span.textContent = m.log.text + "\n";
      log.appendChild(span);
      return;
    }
    dStatus.textContent = m.status;
    dTime.textContent = m.run_time ? "in " + m.run_time : "";
    if (m.result !== undefined) {
      result.textContent = JSON.stringify(m.result, null, 2);
      result.hidden = resultHead.hidden = false;
    }
    if (m.error) {
      dError.textContent = m.error;
      dError.hidden = false;
    }
    out.dataset.status = m.status;
  }

  async function deploy() {
    failure.textContent = said.textContent = "";
    busy(true);
    try {
      const res = await post("deploy", { message: document.getElementById("editor-message").value });
      const data = await res.json().catch(() => ({ error: "the host answered " + res.status }));
      if (!res.ok) {
        refused(data, res.status);
        return;
      }
      said.textContent = data.said;
      root.dataset.deployed = data.target;
      if (isNew) {
        const a = document.createElement("a");
        a.href = base;
        a.textContent = " Open its page.";
        said.appendChild(a);
      }
    } catch (err) {
      failure.textContent = "not deployed: " + err.message;
    } finally {
      busy(false);
    }
  }

  const testButton = document.getElementById("editor-test");
  if (testButton) testButton.addEventListener("click", testRun);
  document.getElementById("editor-deploy").addEventListener("click", deploy);
  check();
})();
