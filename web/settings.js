// The sidebar's controls as request fields. Only what the user set goes out,
// so the server's defaults apply to the rest (e.g. specprefill unset: the
// server's threshold decides).

/**
 * @param {string} id
 * @returns {string}
 */
function value(id) {
  const element = /** @type {HTMLInputElement | HTMLSelectElement} */ (document.getElementById(id));
  return element.value.trim();
}

/** @returns {Record<string, unknown>} sampling and speculative fields of a request */
export function requestFields() {
  /** @type {Record<string, unknown>} */
  const body = {};
  for (const id of ["temperature", "top_p", "min_p", "specprefill_keep_pct"]) {
    if (value(id) !== "") body[id] = Number(value(id));
  }
  for (const id of ["top_k", "max_tokens", "seed"]) {
    if (value(id) !== "") body[id] = Math.trunc(Number(value(id)));
  }
  const stop = value("stop");
  if (stop) body.stop = stop.split(",").map((s) => s.trim()).filter((s) => s !== "");
  for (const id of ["specprefill", "speculative_decoding"]) {
    if (value(id) !== "") body[id] = value(id) === "true";
  }
  const selection = /** @type {HTMLInputElement} */ (document.getElementById("return_selection"));
  if (selection.checked) body.specprefill_return_selection = true;
  return body;
}
