// The SpecPrefill view: the last answer's prompt with the chunks the draft
// kept highlighted, a heat strip of per-chunk importance, and the numbers
// (kept fraction, scoring time, fallback reason). Data: usage.specprefill
// and its `selection` (asked for with specprefill_return_selection).

/**
 * @param {string} id
 * @returns {any}
 */
const $ = (id) => document.getElementById(id);

/**
 * Importance to a colour: dark blue (least) to yellow (most), min-max
 * normalised over the prompt's chunks.
 * @param {number} t in [0, 1]
 * @returns {string}
 */
function heat(t) {
  const hue = 240 - 180 * t;
  return `hsl(${hue.toFixed(0)} 80% ${(25 + 35 * t).toFixed(0)}%)`;
}

/**
 * @param {HTMLCanvasElement} canvas
 * @param {number[]} importance
 * @param {boolean[]} kept
 */
function drawHeatStrip(canvas, importance, kept) {
  const width = canvas.clientWidth || 1000;
  canvas.width = width;
  const context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const height = canvas.height;
  context.clearRect(0, 0, width, height);
  // Log scale when every score is positive (attention mass: a few chunks
  // such as a needle can hold most of it, which a linear scale would leave
  // as one bright cell on a flat field); linear otherwise.
  const log = importance.every((v) => v > 0);
  const scaled = importance.map((v) => (log ? Math.log(v) : v));
  const lo = Math.min(...scaled);
  const hi = Math.max(...scaled);
  const n = importance.length;
  for (let i = 0; i < n; ++i) {
    const x0 = Math.floor((i * width) / n);
    const x1 = Math.floor(((i + 1) * width) / n);
    context.fillStyle = heat(hi > lo ? (scaled[i] - lo) / (hi - lo) : 1);
    context.fillRect(x0, 6, Math.max(1, x1 - x0), height - 6);
    if (kept[i]) {  // a bright bar over every kept chunk
      context.fillStyle = "#3ddc84";
      context.fillRect(x0, 0, Math.max(1, x1 - x0), 5);
    }
  }
}

/**
 * @param {string} className
 * @param {string} text
 * @param {string} title
 * @returns {HTMLSpanElement}
 */
function span(className, text, title) {
  const element = document.createElement("span");
  element.className = className;
  element.textContent = text;  // prompt text is user data: never HTML
  element.title = title;
  return element;
}

/**
 * Shows the SpecPrefill outcome of `usage` (a final usage object).
 * @param {any} usage
 * @returns {boolean} whether there was anything to show
 */
export function showSelection(usage) {
  const sp = usage?.specprefill;
  if (!sp) return false;
  $("selection-empty").hidden = true;
  const summary = $("selection-summary");
  const prompt = $("selection-prompt");
  const canvas = /** @type {HTMLCanvasElement} */ ($("selection-heat"));
  const selection = sp.selection;
  if (!sp.applied || !selection) {
    summary.textContent = sp.fallback_reason
      ? `SpecPrefill fell back to a full prefill: ${sp.fallback_reason} (after ${sp.scoring_ms.toFixed(1)} ms)`
      : "SpecPrefill did not apply to the last request (below the server's threshold, or turned off).";
    summary.dataset.applied = "false";
    prompt.replaceChildren();
    canvas.hidden = true;
    return true;
  }
  const keptCount = selection.kept.filter(Boolean).length;
  summary.dataset.applied = "true";
  summary.textContent =
    `Kept ${keptCount} of ${selection.chunks.length} chunks of ${selection.chunk_size} tokens: ` +
    `${sp.kept_tokens} of ${sp.prompt_tokens} scored tokens (${(selection.kept_fraction * 100).toFixed(1)}%), ` +
    `scoring ${sp.scoring_ms.toFixed(1)} ms` +
    (selection.prefix_tokens > 0 ? `; ${selection.prefix_tokens} cached prefix tokens not scored` : "");
  canvas.hidden = false;
  drawHeatStrip(canvas, selection.importance, selection.kept);
  $("selection-legend").textContent =
    "Heat strip: one cell per chunk, blue = low draft importance, yellow = high (log scale); a green bar marks a kept chunk. Below, kept chunks are highlighted.";
  /** @type {string[]} */
  const texts = selection.token_texts;
  const nodes = [];
  if (selection.prefix_tokens > 0) {
    nodes.push(span("chunk prefix", texts.slice(0, selection.prefix_tokens).join(""), "cached prefix (always prefilled)"));
  }
  selection.chunks.forEach((/** @type {[number, number]} */ range, /** @type {number} */ i) => {
    const [start, end] = range;
    const kept = selection.kept[i];
    const element = span(kept ? "chunk kept" : "chunk", texts.slice(start, end).join(""),
      `chunk ${i} [${start}, ${end}) importance ${selection.importance[i].toPrecision(3)}${kept ? " (kept)" : ""}`);
    element.dataset.chunk = String(i);
    nodes.push(element);
  });
  prompt.replaceChildren(...nodes);
  return true;
}
