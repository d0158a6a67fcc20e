// A function page's run form: the page checks each value against main's types as the host
// does (signature.Check, in its words), checks JSON fields as JSON, and runs "Run and wait"
// in place, following the job's log (/jobs/{id}/log) and showing its outcome. Everything
// shown is set with textContent, never parsed as markup.
"use strict";

(function () {
  const form = document.getElementById("run-form");
  if (!form) return;
  const check = document.getElementById("run-check");
  const jsonNumber = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$/;

  // abbreviate cuts s to n characters (code points), as the host's messages do.
  const abbreviate = (s, n) => {
    const r = Array.from(s);
    return r.length > n ? r.slice(0, n).join("") + "…" : s;
  };

  // kindOf says what a JSON text is, and how a message shows it (signature.kindOf).
  const kindOf = (raw) => {
    const text = raw.trim();
    if (text === "") return [[], "nothing"];
    switch (text[0]) {
      case '"': return [["string"], "string " + abbreviate(text, 40)];
      case "t": case "f": return [["bool"], "boolean " + text];
      case "n": return [["null"], "null"];
      case "[": return [["list"], "array"];
      case "{": return [["object"], "object"];
    }
    if (/[.eE]/.test(text)) return [["float"], "number " + abbreviate(text, 40)];
    return [["int", "float"], "number " + abbreviate(text, 40)];
  };

  // value is the JSON text a field's text stands for (the host's fieldValue), or throws for
  // a JSON field that does not parse.
  const value = (name, kinds, text) => {
    const t = text.trim();
    const any = kinds.length === 0;
    const has = (k) => any || kinds.includes(k);
    if ((has("list") || has("object")) && (t.startsWith("{") || t.startsWith("["))) {
      try { JSON.parse(t); } catch (e) { throw new Error(`argument "${name}": not JSON: ${e.message}`); }
      return t;
    }
    if (((has("int") || has("float")) && jsonNumber.test(t)) || (has("bool") && (t === "true" || t === "false")) || (has("null") && t === "null")) return t;
    if (any) {
      try { JSON.parse(t); return t; } catch (_) { /* text, sent as a string */ }
    }
    return JSON.stringify(text);
  };

  const fields = () => Array.from(form.querySelectorAll(".field[data-param]"));
  const fieldError = (f, msg) => { f.querySelector(".field-error").textContent = msg; };

  // problems returns the message the host would refuse the form with, or "".
  // A required field left empty is marked once the person has been in it, or has pressed
  // Run: not on a form they have only opened.
  const touched = new Set();
  let submitted = false;

  const problems = () => {
    const wrong = [];
    const missing = [];
    let syntax = "";
    let extra = {};
    const extraField = fields().find((f) => f.dataset.param === "");
    const extraText = extraField.querySelector("textarea").value.trim();
    fieldError(extraField, "");
    if (extraText !== "") {
      try {
        extra = JSON.parse(extraText);
        if (extra === null || typeof extra !== "object" || Array.isArray(extra)) throw new Error("it must be a JSON object of arguments, such as {\"name\": \"Ada\"}");
      } catch (e) {
        syntax = "other arguments: " + e.message;
        fieldError(extraField, syntax);
        extra = {};
      }
    }
    for (const f of fields()) {
      const name = f.dataset.param;
      if (name === "") continue;
      fieldError(f, "");
      const kinds = f.dataset.kinds ? f.dataset.kinds.split(" ") : [];
      const input = f.querySelector("[name^='arg.']");
      const secret = f.querySelector("select.secret");
      input.disabled = !!(secret && secret.value);
      if (secret && secret.value) continue; // a $secret: reference is judged once resolved
      let raw;
      if (input.value === "" && f.dataset.required && !Object.prototype.hasOwnProperty.call(extra, name)) {
        // The host's words (missingRequired): left out, main would fail on its first line.
        const msg = `argument "${name}" is required (main has no default for it): fill it in`;
        missing.push(msg);
        if (touched.has(name) || submitted) fieldError(f, msg);
        continue;
      }
      if (input.value !== "") {
        try { raw = value(name, kinds, input.value); } catch (e) {
          syntax = syntax || e.message;
          fieldError(f, e.message);
          continue;
        }
      } else if (Object.prototype.hasOwnProperty.call(extra, name)) {
        raw = JSON.stringify(extra[name]);
      } else {
        continue;
      }
      if (kinds.length === 0) continue; // a type the host does not check
      const [got, desc] = kindOf(raw);
      if (got[0] === "string" && JSON.parse(raw).startsWith("$secret:")) continue;
      if (!got.some((k) => kinds.includes(k))) {
        const msg = `argument "${name}": expected ${f.dataset.type}, got ${desc}`;
        wrong.push(msg);
        fieldError(f, msg);
      }
    }
    if (syntax) return syntax;
    if (wrong.length > 0) return wrong.join("; ") + "; fix the payload (the types come from main's signature)";
    return missing.join("; ");
  };

  // Each problem is shown once, at its field (the host's words); #run-check is for what only
  // the host can say, once the form was sent.
  const recheck = (e) => {
    const f = e && e.target && e.target.closest && e.target.closest(".field[data-param]");
    if (f && f.dataset.param) touched.add(f.dataset.param);
    problems();
    check.textContent = "";
  };
  form.addEventListener("input", recheck);
  form.addEventListener("change", recheck);
  form.addEventListener("focusout", recheck);

  form.addEventListener("submit", (e) => {
    submitted = true;
    const msg = problems();
    check.textContent = "";
    if (msg) {
      e.preventDefault();
      const bad = fields().find((f) => f.querySelector(".field-error").textContent !== "");
      if (bad) bad.querySelector("textarea, input, select").focus();
      return;
    }
    if (!e.submitter || e.submitter.value !== "wait") return; // Run: the job's page
    e.preventDefault();
    runAndWait();
  });

  const out = document.getElementById("run-out");
  const log = document.getElementById("run-log");
  const status = document.getElementById("run-status");
  const result = document.getElementById("run-result");
  const failure = document.getElementById("run-error");
  const link = document.getElementById("run-job");
  const resultHead = document.getElementById("run-result-head");

  // form.action would be the buttons named "action", not the attribute.
  async function runAndWait() {
    const body = new URLSearchParams(new FormData(form));
    body.set("action", "wait");
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    try {
      const res = await fetch(form.getAttribute("action"), { method: "POST", body, credentials: "same-origin", headers: { Accept: "application/json" } });
      const data = await res.json().catch(() => ({ error: "the host answered " + res.status }));
      if (!res.ok) {
        check.textContent = data.error || "the host answered " + res.status;
        return;
      }
      follow(data.job_id);
    } catch (err) {
      check.textContent = "the run was not sent: " + err.message;
    } finally {
      for (const b of form.querySelectorAll("button")) b.disabled = false;
    }
  }

  function follow(id) {
    out.hidden = false;
    log.textContent = "";
    result.hidden = resultHead.hidden = failure.hidden = true;
    link.textContent = id;
    link.href = "/jobs/" + encodeURIComponent(id);
    status.textContent = "queued";
    delete out.dataset.status;
    const src = new EventSource("/jobs/" + encodeURIComponent(id) + "/log");
    src.onmessage = (e) => {
      const line = JSON.parse(e.data);
      const span = document.createElement("span");
      span.className = line.stream;
      span.textContent = line.text + "\n";
      log.appendChild(span);
      status.textContent = "running";
    };
    src.addEventListener("end", async (e) => {
      src.close();
      const info = JSON.parse(e.data);
      if (info.error) {
        status.textContent = "log stopped: " + info.error;
        return;
      }
      const res = await fetch("/jobs/" + encodeURIComponent(id) + "/outcome", { credentials: "same-origin" });
      const o = await res.json();
      status.textContent = o.status;
      if (o.result !== undefined) {
        result.textContent = JSON.stringify(o.result, null, 2);
        result.hidden = resultHead.hidden = false;
      } else if (o.result_bytes) {
        result.textContent = `the result (${o.result_bytes} bytes) is too large for the job's record; it was published on agent.result.<function>`;
        result.hidden = resultHead.hidden = false;
      }
      if (o.error) {
        failure.textContent = o.error;
        failure.hidden = false;
      }
      out.dataset.status = o.status;
    });
  }

  check.textContent = "";
})();
