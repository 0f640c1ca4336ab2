// The server's API as the page uses it: the API key (kept in localStorage,
// sent as a Bearer header), streamed completions over SSE (fetch +
// ReadableStream, one `data:` line per event) and the /metrics text.

const KEY_STORAGE = "specstack.apiKey";

/** @returns {string} the stored API key, "" if none */
export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) ?? "";
}

/** @param {string} key */
export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

/** An OpenAI-style error the server sent (or a network failure). */
export class ApiError extends Error {
  /**
   * @param {number} status HTTP status; 0 for a failure without a response
   * @param {string} message
   * @param {string} [type]
   */
  constructor(status, message, type = "") {
    super(message);
    this.status = status;
    this.type = type;
  }
}

/** @returns {Record<string, string>} */
function headers() {
  /** @type {Record<string, string>} */
  const out = { "Content-Type": "application/json" };
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

/**
 * @param {Response} response
 * @returns {Promise<ApiError>}
 */
async function errorOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    return new ApiError(response.status, body.error?.message ?? text, body.error?.type ?? "");
  } catch {
    return new ApiError(response.status, text || response.statusText);
  }
}

/**
 * GET a JSON /v1 route.
 * @param {string} path
 * @returns {Promise<any>}
 */
export async function getJson(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

/**
 * @typedef {object} StreamHandlers
 * @property {(choice: any) => void} onChoice every chunk's choices[0] (text or delta)
 * @property {(usage: any) => void} onUsage the final usage chunk
 * @property {AbortSignal} signal aborts the fetch; the server cancels the request
 */

/**
 * POSTs a streamed completion and calls the handlers as events arrive.
 * Resolves at [DONE] (or when aborted); rejects with ApiError on an HTTP
 * error or an SSE error event.
 * @param {"/v1/chat/completions" | "/v1/completions"} path
 * @param {Record<string, unknown>} body
 * @param {StreamHandlers} handlers
 */
export async function streamCompletion(path, body, handlers) {
  const request = { ...body, stream: true, stream_options: { include_usage: true } };
  let response;
  try {
    response = await fetch(path, {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(request),
      signal: handlers.signal,
    });
  } catch (e) {
    if (handlers.signal.aborted) return;
    throw new ApiError(0, `request failed: ${e}`);
  }
  if (!response.ok || !response.body) throw await errorOf(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let next;
    try {
      next = await reader.read();
    } catch (e) {
      if (handlers.signal.aborted) return;
      throw new ApiError(0, `stream broken: ${e}`);
    }
    if (next.done) return;
    buffer += next.value;
    // Events end with a blank line; lines starting with ':' are heartbeats.
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(200, chunk.error.message ?? "error", chunk.error.type);
        if (chunk.choices?.length) handlers.onChoice(chunk.choices[0]);
        if (chunk.usage) handlers.onUsage(chunk.usage);
      }
    }
  }
}

/** @returns {Promise<string>} the Prometheus text of /metrics */
export async function fetchMetrics() {
  const response = await fetch("/metrics", { headers: headers() });
  if (!response.ok) throw await errorOf(response);
  return response.text();
}
