// Text shown exactly as it will run or be written, for the approval dialog (docs/web.md).
//
// What the user approves must read as what happens: every newline is a line of its own
// (numbered when there are several), and every character that prints as nothing, moves
// the text or changes how the shell splits it is shown as a marked ⟨U+XXXX⟩ badge
// instead. Only DOM text is set: nothing here is parsed as HTML.

// Revealed: control characters (C0 but newline and tab, DEL, C1), format characters
// (bidi controls and isolates, zero-width characters, soft hyphen, word joiners, tags,
// the interlinear annotation marks, the BOM), the line and paragraph separators, lone
// surrogates, and Unicode's other default-ignorable code points (combining grapheme
// joiner, Hangul fillers, Khmer inherent vowels, Mongolian and other variation
// selectors, shorthand format controls, musical format controls, the tag block).
const HIDDEN =
  /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8\u{1bca0}-\u{1bca3}\u{1d173}-\u{1d17a}\u{e0000}-\u{e0fff}]/gu;
const KEPT = new Set(["\n", "\t"]);

/** `U+00AD` for one character. */
export function codePoint(character) {
  return `U+${character.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
}

/** `text` for a single line (a name, a label): each hidden character, newlines too,
 * written as ⟨U+XXXX⟩; tabs stay. */
export function revealedText(text) {
  return String(text).replace(HIDDEN, (c) => (c === "\t" ? c : `⟨${codePoint(c)}⟩`));
}

/** Append `text` to `parent`: plain runs as text, each hidden character as a marked
 * badge (`<span class="hidden-char">⟨U+XXXX⟩</span>`). Newlines and tabs stay. */
export function appendRevealed(parent, text) {
  const value = String(text);
  let last = 0;
  for (const found of value.matchAll(HIDDEN)) {
    const character = found[0];
    if (KEPT.has(character)) continue;
    if (found.index > last) parent.append(value.slice(last, found.index));
    const badge = document.createElement("span");
    badge.className = "hidden-char";
    badge.textContent = `⟨${codePoint(character)}⟩`;
    badge.title = `an invisible or control character (${codePoint(character)}) is here`;
    parent.append(badge);
    last = found.index + character.length;
  }
  if (last < value.length) parent.append(value.slice(last));
}

/** Fill `box` with `text` shown exactly: one line as it is, several as a numbered list
 * (`<ol class="exact-lines">`, one `<li>` a line, a trailing empty line included). */
export function showExact(box, text, { numbered = true } = {}) {
  box.textContent = "";
  const lines = String(text ?? "").split("\n");
  box.dataset.lines = String(lines.length);
  if (!numbered || lines.length === 1) {
    appendRevealed(box, lines.join("\n"));
    return;
  }
  const list = document.createElement("ol");
  list.className = "exact-lines";
  // The gutter is as wide as the largest number.
  list.style.setProperty("--gutter", `${String(lines.length).length + 2}ch`);
  for (const line of lines) {
    const item = document.createElement("li");
    appendRevealed(item, line);
    list.append(item);
  }
  box.append(list);
}

/** Fill `pre` with a unified diff, one `<span>` a line: added lines `.diff-add`, removed
 * `.diff-del`, hunk headers (and `\ No newline at end of file`) `.diff-hunk`, file
 * headers `.diff-file`; hidden characters revealed as everywhere else. */
export function showDiff(pre, diff) {
  pre.textContent = "";
  const lines = String(diff ?? "").replace(/\n$/, "").split("\n");
  for (const line of lines) {
    const span = document.createElement("span");
    span.className = diffClass(line);
    appendRevealed(span, line);
    pre.append(span, "\n");
  }
}

function diffClass(line) {
  if (line.startsWith("+++ ") || line.startsWith("--- ")) return "diff-line diff-file";
  if (line.startsWith("@@") || line.startsWith("\\")) return "diff-line diff-hunk";
  if (line.startsWith("+")) return "diff-line diff-add";
  if (line.startsWith("-")) return "diff-line diff-del";
  return "diff-line";
}
