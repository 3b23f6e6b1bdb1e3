// A small, safe Markdown renderer and code highlighter for the web client.
//
// It builds DOM nodes and only ever sets text (textContent, createTextNode): nothing the
// model writes is parsed as HTML, so there is nothing to sanitize. Links are kept only for
// http(s) and mailto URLs and open in a new tab without a referrer.
//
// Blocks: fenced code (``` or ~~~, an unclosed fence while streaming runs to the end),
// ATX headings, block quotes, - * + and 1. lists, horizontal rules, tables (| a | b |),
// paragraphs. Inline: `code`, **strong**, *em* / _em_, ~~del~~, [text](url), <https://...>.

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function safeUrl(url) {
  try {
    const parsed = new URL(url, "http://invalid.invalid/");
    if (parsed.origin === "http://invalid.invalid") return null; // relative: not ours to resolve
    return ["http:", "https:", "mailto:"].includes(parsed.protocol) ? parsed.href : null;
  } catch {
    return null;
  }
}

function link(text, url) {
  const href = safeUrl(url);
  if (!href) return document.createTextNode(text);
  const a = el("a", null, text);
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return a;
}

// Past this many characters a text is shown as it is: the inline scan is linear, but a
// reply that large is read as plain text anyway.
const INLINE_LIMIT = 200_000;
const WORD = /[\p{L}\p{N}_]/u;
const LINK_TEXT_MAX = 1_000;
const LINK_TARGET = /\(\s*<?([^)\s>]{1,2048})>?(?:\s+"[^"\n]{0,500}")?\s*\)/y;
const AUTOLINK = /<((?:https?:\/\/|mailto:)[^>\s]{1,2048})>/y;
// Emphasis delimiters, longest first: [delimiter, element].
const EMPHASIS = [
  ["**", "strong"],
  ["__", "strong"],
  ["~~", "del"],
  ["*", "em"],
  ["_", "em"],
];

/** Where each delimiter may close a span in `text` (after a non-space; `_` not inside a
 * word), ascending: found once per text, so the scan stays linear however many
 * delimiters never close. */
function closers(text) {
  const found = new Map(EMPHASIS.map(([mark]) => [mark, []]));
  for (let i = 1; i < text.length; i++) {
    const c = text[i];
    if (c !== "*" && c !== "_" && c !== "~") continue;
    if (/\s/.test(text[i - 1])) continue;
    for (const [mark] of EMPHASIS) {
      if (!text.startsWith(mark, i)) continue;
      if (mark[0] === "_" && WORD.test(text[i + mark.length] ?? "")) continue;
      found.get(mark).push(i);
    }
  }
  return found;
}

/** The first closer of `mark` at or after `from` (each list is read forward only). */
function nextCloser(state, mark, from) {
  const list = state.closers.get(mark);
  let at = state.cursor.get(mark) ?? 0;
  while (at < list.length && list[at] < from) at++;
  state.cursor.set(mark, at);
  return at < list.length ? list[at] : -1;
}

/** Append the inline Markdown of `text` to `parent` (code, strong, em, del, links). */
export function renderInline(parent, text) {
  if (text.length > INLINE_LIMIT) {
    parent.append(text);
    return;
  }
  const state = { closers: closers(text), cursor: new Map(), ticks: new Map() };
  let plain = 0; // start of the text not yet appended
  let i = 0;
  const flushTo = (end) => {
    if (end > plain) parent.append(text.slice(plain, end));
  };
  while (i < text.length) {
    const c = text[i];
    if (c === "`") {
      let run = 1;
      while (text[i + run] === "`") run++;
      const ticks = "`".repeat(run);
      // A run with no closer from here on has none from any later place either.
      const known = state.ticks.get(run);
      const end = known !== undefined && known < i + run ? -1 : text.indexOf(ticks, i + run);
      if (end === -1) {
        state.ticks.set(run, Infinity);
        i += run;
        continue;
      }
      state.ticks.set(run, end);
      flushTo(i);
      parent.append(el("code", null, text.slice(i + run, end).replace(/^ (.*) $/s, "$1")));
      i = plain = end + run;
      continue;
    }
    if (c === "*" || c === "_" || c === "~") {
      const opener = EMPHASIS.find(
        ([mark]) =>
          text.startsWith(mark, i) &&
          text[i + mark.length] !== undefined &&
          !/\s/.test(text[i + mark.length]) &&
          !(mark[0] === "_" && i > 0 && WORD.test(text[i - 1])),
      );
      if (opener) {
        const [mark, tag] = opener;
        const end = nextCloser(state, mark, i + mark.length + 1);
        if (end !== -1) {
          flushTo(i);
          const node = el(tag);
          renderInline(node, text.slice(i + mark.length, end));
          parent.append(node);
          i = plain = end + mark.length;
          continue;
        }
      }
      i++;
      continue;
    }
    if (c === "[") {
      const close = text.indexOf("]", i + 1);
      const label = close === -1 ? "" : text.slice(i + 1, close);
      if (close !== -1 && close - i <= LINK_TEXT_MAX && !label.includes("\n")) {
        LINK_TARGET.lastIndex = close + 1;
        const target = LINK_TARGET.exec(text);
        if (target) {
          flushTo(i);
          parent.append(link(label || target[1], target[1]));
          i = plain = LINK_TARGET.lastIndex;
          continue;
        }
      }
      i++;
      continue;
    }
    if (c === "<") {
      AUTOLINK.lastIndex = i;
      const auto = AUTOLINK.exec(text);
      if (auto) {
        flushTo(i);
        parent.append(link(auto[1], auto[1]));
        i = plain = AUTOLINK.lastIndex;
        continue;
      }
    }
    i++;
  }
  flushTo(text.length);
}

// ------------------------------------------------------------------ code highlighting

const KEYWORDS = new Set(
  (
    "abstract as async await break case catch class const continue def default defer del delete do elif else " +
    "enum except export extends false fi final finally fn for from func function go if impl implements import in " +
    "instanceof interface is lambda let loop match mod mut new nil none not null or and package pass private " +
    "protected pub public raise return self static struct super switch then this throw throws trait true try " +
    "type typeof undefined unsafe use var void where while with yield echo local readonly done esac True False None"
  ).split(" "),
);
const HASH_COMMENTS = new Set(["py", "python", "sh", "bash", "shell", "zsh", "yaml", "yml", "toml", "rb", "ruby", "r", "make", "makefile", "dockerfile", "conf", "ini"]);
const PLAIN = new Set(["", "text", "txt", "plain", "diff", "md", "markdown", "output", "console"]);

function tokenPattern(lang) {
  const comment = HASH_COMMENTS.has(lang) ? "#[^\\n]*" : "\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)";
  return new RegExp(
    `(${comment})|("(?:[^"\\\\\\n]|\\\\.)*"?|'(?:[^'\\\\\\n]|\\\\.)*'?|\`(?:[^\`\\\\]|\\\\.)*\`?)|(\\b\\d[\\d_]*(?:\\.\\d+)?(?:e[+-]?\\d+)?\\b|\\b0x[\\da-f]+\\b)|([A-Za-z_$][\\w$]*)`,
    "gi",
  );
}

/** Fill `code` (a <code> element) with `text`, keywords, strings, numbers and comments in spans. */
export function highlight(code, text, lang) {
  lang = (lang || "").toLowerCase();
  code.textContent = "";
  if (lang === "diff") {
    for (const line of text.split("\n")) {
      const cls = line.startsWith("+") ? "hl-add" : line.startsWith("-") ? "hl-del" : line.startsWith("@@") ? "hl-meta" : null;
      code.append(cls ? el("span", cls, line) : line, "\n");
    }
    if (code.lastChild) code.lastChild.remove();
    return;
  }
  if (PLAIN.has(lang)) {
    code.textContent = text;
    return;
  }
  const pattern = tokenPattern(lang);
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    const [token, comment, string, number, word] = match;
    let cls = null;
    if (comment) cls = "hl-com";
    else if (string) cls = "hl-str";
    else if (number) cls = "hl-num";
    else if (word && KEYWORDS.has(word)) cls = "hl-kw";
    if (!cls) continue;
    if (match.index > last) code.append(text.slice(last, match.index));
    code.append(el("span", cls, token));
    last = match.index + token.length;
  }
  if (last < text.length) code.append(text.slice(last));
}

/** A <pre><code> block, highlighted for `lang`. */
export function codeBlock(text, lang) {
  const pre = el("pre", "code");
  const code = el("code");
  if (lang) {
    pre.dataset.lang = lang;
    code.className = `lang-${lang.replace(/[^\w-]/g, "")}`;
  }
  highlight(code, text, lang);
  pre.append(code);
  return pre;
}

// ------------------------------------------------------------------ blocks

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|")) row = row.slice(0, -1);
  return row.split("|").map((cell) => cell.trim());
}

/** Render Markdown `source` into a new <div class="markdown">. */
// Quotes nest at most this deep; deeper `>` markers are shown as text.
const QUOTE_DEPTH = 32;

export function renderMarkdown(source, depth = 0) {
  const root = el("div", "markdown");
  const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  let paragraph = [];
  const flush = () => {
    if (paragraph.length) {
      const p = el("p");
      paragraph.forEach((line, index) => {
        if (index) p.append(el("br"));
        renderInline(p, line.trim());
      });
      root.append(p);
      paragraph = [];
    }
  };
  while (i < lines.length) {
    const line = lines[i];
    let match;
    if ((match = FENCE.exec(line))) {
      flush();
      const fence = match[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
      i++; // the closing fence (or past the end while it streams)
      root.append(codeBlock(body.join("\n"), match[2]));
      continue;
    }
    if (!line.trim()) {
      flush();
      i++;
      continue;
    }
    if ((match = HEADING.exec(line))) {
      flush();
      const h = el(`h${Math.min(match[1].length + 2, 6)}`);
      renderInline(h, match[2]);
      root.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      root.append(el("hr"));
      i++;
      continue;
    }
    if (depth < QUOTE_DEPTH && QUOTE.test(line)) {
      flush();
      const body = [];
      while (i < lines.length && (match = QUOTE.exec(lines[i]))) {
        body.push(match[1]);
        i++;
      }
      const quote = el("blockquote");
      quote.append(...renderMarkdown(body.join("\n"), depth + 1).childNodes);
      root.append(quote);
      continue;
    }
    if (BULLET.test(line) || ORDERED.test(line)) {
      flush();
      const ordered = !BULLET.test(line);
      const list = el(ordered ? "ol" : "ul");
      if (ordered) {
        const start = Number(ORDERED.exec(line)[2]);
        if (start !== 1) list.start = start;
      }
      const itemRe = ordered ? ORDERED : BULLET;
      let item = null;
      while (i < lines.length && lines[i].trim()) {
        const m = itemRe.exec(lines[i]);
        if (m && m[1].length < 2) {
          item = el("li");
          const task = /^\[([ xX])\]\s+(.*)$/.exec(m[3]);
          if (task) {
            item.append(el("span", "task", task[1] === " " ? "☐ " : "☑ "));
            renderInline(item, task[2]);
          } else {
            renderInline(item, m[3]);
          }
          list.append(item);
        } else if (item) {
          item.append(el("br"));
          renderInline(item, lines[i].trim());
        } else {
          break;
        }
        i++;
      }
      root.append(list);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      flush();
      const table = el("table");
      const head = el("thead");
      const headRow = el("tr");
      for (const cell of splitRow(line)) {
        const th = el("th");
        renderInline(th, cell);
        headRow.append(th);
      }
      head.append(headRow);
      table.append(head);
      const body = el("tbody");
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        const tr = el("tr");
        for (const cell of splitRow(lines[i])) {
          const td = el("td");
          renderInline(td, cell);
          tr.append(td);
        }
        body.append(tr);
        i++;
      }
      table.append(body);
      const wrap = el("div", "table-wrap");
      wrap.append(table);
      root.append(wrap);
      continue;
    }
    paragraph.push(line);
    i++;
  }
  flush();
  return root;
}
