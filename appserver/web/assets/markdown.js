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

const INLINE = [
  { re: /`+/, kind: "code" },
  { re: /\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__/, kind: "strong" },
  { re: /\*(?=\S)([\s\S]*?\S)\*|\b_(?=\S)([\s\S]*?\S)_\b/, kind: "em" },
  { re: /~~(?=\S)([\s\S]*?\S)~~/, kind: "del" },
  { re: /\[([^\]\n]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/, kind: "link" },
  { re: /<((?:https?:\/\/|mailto:)[^>\s]+)>/, kind: "autolink" },
];

/** Append the inline Markdown of `text` to `parent`. */
export function renderInline(parent, text) {
  while (text) {
    let best = null;
    for (const rule of INLINE) {
      const match = rule.re.exec(text);
      if (match && (best === null || match.index < best.match.index)) best = { rule, match };
    }
    if (!best) {
      parent.append(text);
      return;
    }
    const { rule, match } = best;
    if (match.index > 0) parent.append(text.slice(0, match.index));
    let rest = text.slice(match.index + match[0].length);
    switch (rule.kind) {
      case "code": {
        const ticks = match[0];
        const end = rest.indexOf(ticks);
        if (end === -1) {
          parent.append(ticks);
        } else {
          parent.append(el("code", null, rest.slice(0, end).replace(/^ (.*) $/s, "$1")));
          rest = rest.slice(end + ticks.length);
        }
        break;
      }
      case "strong":
      case "em":
      case "del": {
        const node = el(rule.kind === "del" ? "del" : rule.kind);
        renderInline(node, match[1] ?? match[2] ?? "");
        parent.append(node);
        break;
      }
      case "link":
        parent.append(link(match[1] || match[2], match[2]));
        break;
      case "autolink":
        parent.append(link(match[1], match[1]));
        break;
    }
    text = rest;
  }
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
export function renderMarkdown(source) {
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
    if (QUOTE.test(line)) {
      flush();
      const body = [];
      while (i < lines.length && (match = QUOTE.exec(lines[i]))) {
        body.push(match[1]);
        i++;
      }
      const quote = el("blockquote");
      quote.append(...renderMarkdown(body.join("\n")).childNodes);
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
