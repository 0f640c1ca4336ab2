// The page's entry point: tabs, the API key dialog, and wiring between the
// playground (answers), the SpecPrefill view and the metrics page.
import { ApiError, apiKey, getJson, setApiKey } from "./api.js";
import { setupMetrics } from "./metrics.js";
import { setupPlayground } from "./playground.js";
import { showSelection } from "./selection_view.js";

/**
 * @param {string} id
 * @returns {any}
 */
const $ = (id) => document.getElementById(id);

let activeTab = "chat";

/** @param {string} tab */
function showTab(tab) {
  activeTab = tab;
  for (const button of document.querySelectorAll(".tab")) {
    button.classList.toggle("active", /** @type {HTMLElement} */ (button).dataset.tab === tab);
  }
  for (const panel of document.querySelectorAll(".panel")) {
    /** @type {HTMLElement} */ (panel).hidden = panel.id !== `tab-${tab}`;
  }
  if (tab === "metrics") pollMetrics();
}

/**
 * Shows the API key dialog; resolves true when a key was saved.
 * @param {string} reason
 * @returns {Promise<boolean>}
 */
function askKey(reason) {
  const dialog = /** @type {HTMLDialogElement} */ ($("key-dialog"));
  $("key-reason").textContent = reason;
  $("key-input").value = apiKey();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const saved = dialog.returnValue === "save" && $("key-input").value.trim() !== "";
      if (saved) setApiKey($("key-input").value.trim());
      resolve(saved);
    }, { once: true });
    dialog.showModal();
  });
}

/** Reads the served model's name; a 401 asks for the key first. */
async function loadModel() {
  for (;;) {
    try {
      const models = await getJson("/v1/models");
      $("model-name").textContent = models.data?.[0]?.id ?? "";
      return;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        const reason = apiKey() ? "The saved API key was refused; enter the server's --api-key." : "This server needs an API key (--api-key).";
        if (await askKey(reason)) continue;
        $("model-name").textContent = "(no API key)";
        return;
      }
      $("model-name").textContent = `(${e instanceof Error ? e.message : e})`;
      return;
    }
  }
}

const pollMetrics = setupMetrics(() => activeTab === "metrics");
for (const button of document.querySelectorAll(".tab")) {
  button.addEventListener("click", () => showTab(/** @type {HTMLElement} */ (button).dataset.tab ?? "chat"));
}
$("key-button").addEventListener("click", () => askKey("API key for this server (kept in this browser's localStorage)."));
setupPlayground({
  onUsage: (usage) => showSelection(usage),
  askKey: () => askKey("The server refused the request: enter its API key (--api-key)."),
});
loadModel();
