// The dashboard's source editor: CodeMirror 6 with Python, TypeScript/JavaScript and bash
// highlighting and a lint gutter the page fills with the host's own check (editor-page.js).
// Bundled by scripts/build-editor into internal/dashboard/assets/editor.min.js, which
// exposes window.HostEditor.
import { EditorState } from "@codemirror/state";
import { EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter, drawSelection } from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { syntaxHighlighting, defaultHighlightStyle, indentOnInput, bracketMatching, StreamLanguage, indentUnit } from "@codemirror/language";
import { searchKeymap, highlightSelectionMatches } from "@codemirror/search";
import { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
import { lintGutter, setDiagnostics, lintKeymap } from "@codemirror/lint";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";
import { shell } from "@codemirror/legacy-modes/mode/shell";

// language is the highlighting for a runtime, by the entry file's extension.
function language(lang) {
  switch (lang) {
    case "py":
      return python();
    case "ts":
      return javascript({ typescript: true });
    case "js":
    case "mjs":
    case "cjs":
      return javascript();
    case "sh":
      return StreamLanguage.define(shell);
  }
  return [];
}

// csp is what the dashboard's Content-Security-Policy needs: its lint marks drawn without the
// data: images it refuses (img-src 'self'), and the editor's size and font.
const csp = EditorView.theme({
  "&": { maxHeight: "70vh", fontSize: "13px", backgroundColor: "#fff" },
  ".cm-content, .cm-gutter": { minHeight: "18em" },
  ".cm-scroller": { fontFamily: "ui-monospace, monospace" },
  ".cm-lint-marker-error": { content: "normal !important", display: "inline-block", width: "0.7em", height: "0.7em", borderRadius: "50%", backgroundColor: "#d1242f" },
  ".cm-lintRange-error": { backgroundImage: "none !important", textDecoration: "underline wavy #d1242f", textDecorationSkipInk: "none" },
});

// create puts an editor of doc into parent; onChange is called with the text after each edit.
// It lives in a shadow root of parent: there CodeMirror styles itself with a constructed style
// sheet, which the dashboard's CSP (no inline <style>) lets through, where a <style> in the
// document would be refused.
function create(parent, { doc, lang, onChange }) {
  const shadow = parent.attachShadow({ mode: "open" });
  const view = new EditorView({
    root: shadow,
    parent: shadow,
    state: EditorState.create({
      doc,
      extensions: [
        lineNumbers(),
        highlightActiveLineGutter(),
        lintGutter(),
        history(),
        drawSelection(),
        indentOnInput(),
        bracketMatching(),
        closeBrackets(),
        highlightActiveLine(),
        highlightSelectionMatches(),
        indentUnit.of(lang === "py" ? "    " : "  "),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        keymap.of([...closeBracketsKeymap, ...defaultKeymap, ...searchKeymap, ...historyKeymap, ...lintKeymap, indentWithTab]),
        language(lang),
        csp,
        EditorView.updateListener.of((u) => {
          if (u.docChanged && onChange) onChange(u.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    view,
    value: () => view.state.doc.toString(),
    // mark shows the check's problems: [{line, message}], line 0 for the file as a whole.
    mark(problems) {
      const doc = view.state.doc;
      const diags = problems.map((p) => {
        const n = Math.min(Math.max(p.line || 1, 1), doc.lines);
        const line = doc.line(n);
        return { from: line.from, to: line.to, severity: "error", message: p.message, source: "host check" };
      });
      view.dispatch(setDiagnostics(view.state, diags));
    },
    // goTo puts the cursor on line n and scrolls it into view.
    goTo(n) {
      const doc = view.state.doc;
      const line = doc.line(Math.min(Math.max(n, 1), doc.lines));
      view.dispatch({ selection: { anchor: line.from }, scrollIntoView: true });
      view.focus();
    },
  };
}

window.HostEditor = { create };
