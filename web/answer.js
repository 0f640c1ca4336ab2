// One streamed answer: sends the request, renders text as it arrives
// (markdown, safely), and ends with a stats line: TTFT, tokens/s and usage
// (cached tokens, usage.specprefill, usage.speculative).
import { ApiError, streamCompletion } from "./api.js";
import { renderMarkdown } from "./markdown.js";

/**
 * @typedef {object} AnswerResult
 * @property {string} text
 * @property {any} usage the final usage, null if none arrived
 * @property {string} stats the stats line
 * @property {string} error the error message, "" if none
 * @property {number} status the HTTP status of an error (401: the API key), 0 otherwise
 */

/**
 * @param {any} usage
 * @param {number} ttftMs
 * @param {number} decodeMs time from the first to the last token
 * @returns {string}
 */
export function statsLine(usage, ttftMs, decodeMs) {
  const parts = [];
  if (Number.isFinite(ttftMs)) parts.push(`TTFT ${ttftMs.toFixed(0)} ms`);
  if (usage) {
    const n = usage.completion_tokens;
    if (n > 1 && decodeMs > 0) parts.push(`${((n - 1) / (decodeMs / 1000)).toFixed(1)} tok/s`);
    parts.push(`prompt ${usage.prompt_tokens} (cached ${usage.prompt_tokens_details?.cached_tokens ?? 0})`);
    parts.push(`completion ${n}`);
    const sp = usage.specprefill;
    if (sp) {
      parts.push(sp.applied
        ? `SpecPrefill kept ${sp.kept_tokens}/${sp.prompt_tokens} (scoring ${sp.scoring_ms.toFixed(0)} ms)`
        : sp.fallback_reason ? `SpecPrefill fell back: ${sp.fallback_reason}` : "SpecPrefill not applied");
    }
    const sd = usage.speculative;
    if (sd) parts.push(`spec decode accepted ${sd.accepted_tokens}/${sd.draft_tokens} (${(sd.acceptance_rate * 100).toFixed(0)}%)`);
  }
  return parts.join(" · ");
}

/**
 * Streams one answer into `target` (its contents are replaced).
 * @param {"/v1/chat/completions" | "/v1/completions"} path
 * @param {Record<string, unknown>} body
 * @param {HTMLElement} target
 * @param {AbortSignal} signal
 * @param {(usage: any) => void} onUsage
 * @returns {Promise<AnswerResult>}
 */
export async function streamAnswer(path, body, target, signal, onUsage) {
  const content = document.createElement("div");
  content.className = "content";
  const stats = document.createElement("div");
  stats.className = "stats";
  stats.dataset.testid = "answer-stats";
  target.replaceChildren(content, stats);
  const chat = path === "/v1/chat/completions";
  const started = performance.now();
  let first = NaN;
  let last = NaN;
  let text = "";
  /** @type {any} */
  let usage = null;
  let error = "";
  let status = 0;
  const render = () => content.replaceChildren(chat ? renderMarkdown(text) : document.createTextNode(text));
  try {
    await streamCompletion(path, body, {
      signal,
      onChoice(choice) {
        const piece = chat ? choice.delta?.content ?? "" : choice.text ?? "";
        if (!piece) return;
        const now = performance.now();
        if (Number.isNaN(first)) first = now;
        last = now;
        text += piece;
        render();
      },
      onUsage(u) {
        usage = u;
        onUsage(u);
      },
    });
  } catch (e) {
    error = e instanceof Error ? e.message : String(e);
    status = e instanceof ApiError ? e.status : 0;
    target.classList.add("error");
  }
  if (signal.aborted) error = error || "stopped";
  const line = statsLine(usage, first - started, last - first) + (error ? ` · ${error}` : "");
  stats.textContent = line;
  return { text, usage, stats: line, error, status };
}
