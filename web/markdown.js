// A small markdown subset rendered as DOM nodes: paragraphs, ``` code
// fences, `inline code`, **bold**, *italic*, - / 1. lists and # headings.
// Model output is untrusted: every piece of it becomes a text node
// (textContent / createTextNode), never HTML, so "<script>" or
// "<img onerror=...>" in an answer shows as those characters.

/**
 * Inline spans of one line: code, bold, italic; the rest is text.
 * @param {string} text
 * @returns {Node[]}
 */
export function renderInline(text) {
  /** @type {Node[]} */
  const nodes = [];
  const pattern = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    const at = match.index ?? 0;
    if (at > last) nodes.push(document.createTextNode(text.slice(last, at)));
    const tag = match[1] !== undefined ? "code" : match[2] !== undefined ? "strong" : "em";
    const element = document.createElement(tag);
    element.textContent = match[1] ?? match[2] ?? match[3] ?? "";
    nodes.push(element);
    last = at + match[0].length;
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

/**
 * @param {HTMLElement} parent
 * @param {string} line
 */
function appendInline(parent, line) {
  for (const node of renderInline(line)) parent.appendChild(node);
}

/**
 * Renders `text` into a fragment. Unclosed fences (a stream still arriving)
 * render as code up to the end.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  const lines = text.split("\n");
  /** @type {HTMLElement | null} */
  let paragraph = null;
  /** @type {HTMLElement | null} */
  let list = null;
  for (let i = 0; i < lines.length; ++i) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+-]*)/);
    if (fence) {
      paragraph = list = null;
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      if (fence[1]) code.dataset.lang = fence[1];
      const body = [];
      for (++i; i < lines.length && !/^\s*```/.test(lines[i]); ++i) body.push(lines[i]);
      code.textContent = body.join("\n");
      pre.appendChild(code);
      fragment.appendChild(pre);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const item = line.match(/^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/);
    if (heading) {
      paragraph = list = null;
      const h = document.createElement(`h${Math.min(heading[1].length + 2, 6)}`);
      appendInline(h, heading[2]);
      fragment.appendChild(h);
    } else if (item) {
      paragraph = null;
      const ordered = item[1] !== undefined;
      if (!list || (list.tagName === "OL") !== ordered) {
        list = document.createElement(ordered ? "ol" : "ul");
        fragment.appendChild(list);
      }
      const li = document.createElement("li");
      appendInline(li, item[2]);
      list.appendChild(li);
    } else if (line.trim() === "") {
      paragraph = list = null;
    } else {
      list = null;
      if (!paragraph) {
        paragraph = document.createElement("p");
        fragment.appendChild(paragraph);
      } else {
        paragraph.appendChild(document.createTextNode("\n"));
      }
      appendInline(paragraph, line);
    }
  }
  return fragment;
}
