// The metrics page: polls /metrics (Prometheus text, parsed here) once a
// second while shown and draws each series on a <canvas> line chart.
import { fetchMetrics } from "./api.js";

/**
 * Prometheus text exposition to {"name{labels}": value}; comments skipped.
 * @param {string} text
 * @returns {Map<string, number>}
 */
export function parsePrometheus(text) {
  /** @type {Map<string, number>} */
  const out = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)/);
    if (match) out.set(match[1], Number(match[2]));
  }
  return out;
}

/**
 * @typedef {object} Series
 * @property {string} label
 * @property {string} color
 * @property {(now: Map<string, number>, before: Map<string, number> | null, dt: number) => number} value
 */
/** @typedef {{id: string, title: string, unit: string, series: Series[]}} ChartSpec */

/**
 * @param {Map<string, number>} m
 * @param {string} name
 */
const get = (m, name) => m.get(name) ?? NaN;

/**
 * Per-second rate of a counter between two scrapes.
 * @param {string} name
 * @returns {Series["value"]}
 */
const rate = (name) => (now, before, dt) => (before && dt > 0 ? Math.max(0, (get(now, name) - get(before, name)) / dt) : NaN);

/** @type {ChartSpec[]} */
const CHARTS = [
  { id: "tokens", title: "Tokens/s", unit: "tok/s", series: [
    { label: "generation", color: "#4f8cff", value: rate("specstack_generation_tokens_total") },
    { label: "prompt", color: "#f0a35e", value: rate("specstack_prompt_tokens_total") }] },
  { id: "requests", title: "Requests", unit: "", series: [
    { label: "running", color: "#3ddc84", value: (m) => get(m, "specstack_num_requests_running") },
    { label: "waiting", color: "#e0c341", value: (m) => get(m, "specstack_num_requests_waiting") }] },
  { id: "kv", title: "KV blocks used", unit: "blocks", series: [
    { label: "used", color: "#b084f5", value: (m) => get(m, "specstack_kv_blocks_total") - get(m, "specstack_kv_blocks_free") },
    { label: "cached", color: "#6b7280", value: (m) => get(m, "specstack_kv_blocks_cached") }] },
  { id: "prefix", title: "Prefix-cache hit rate", unit: "", series: [
    { label: "hit rate", color: "#4fd1c5", value: (m) => get(m, "specstack_prefix_cache_hit_rate") }] },
  { id: "specprefill", title: "SpecPrefill requests", unit: "", series: [
    { label: "applied", color: "#3ddc84", value: (m) => get(m, "specstack_specprefill_applied_total") },
    { label: "fallback", color: "#e5534b", value: (m) => get(m, "specstack_specprefill_fallback_total") }] },
  { id: "acceptance", title: "Spec-decode acceptance rate", unit: "", series: [
    { label: "accepted / drafted", color: "#f0a35e", value: (m) => {
      const drafted = get(m, "specstack_spec_decode_draft_tokens_total");
      return drafted > 0 ? get(m, "specstack_spec_decode_accepted_tokens_total") / drafted : NaN;
    } }] },
];

const HISTORY = 120;

/**
 * @param {HTMLCanvasElement} canvas
 * @param {ChartSpec} spec
 * @param {number[][]} history per series, oldest first
 */
function draw(canvas, spec, history) {
  const width = (canvas.width = canvas.clientWidth || 350);
  const height = (canvas.height = 120);
  const context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  context.clearRect(0, 0, width, height);
  const finite = history.flat().filter(Number.isFinite);
  const top = Math.max(1, ...finite) * 1.1;  // counts and ratios: at least 0..1
  context.strokeStyle = "#2a2f3a";
  context.strokeRect(0.5, 0.5, width - 1, height - 1);
  context.fillStyle = "#9aa3b2";
  context.font = "10px sans-serif";
  context.fillText(finite.length ? top.toPrecision(3) : "no data", 4, 12);
  history.forEach((values, s) => {
    context.strokeStyle = spec.series[s].color;
    context.lineWidth = 1.5;
    context.beginPath();
    let pen = false;
    values.forEach((v, i) => {
      if (!Number.isFinite(v)) { pen = false; return; }
      const x = (i / (HISTORY - 1)) * (width - 2) + 1;
      const y = height - 2 - (v / top) * (height - 16);
      if (pen) context.lineTo(x, y); else context.moveTo(x, y);
      pen = true;
    });
    context.stroke();
  });
}

/** Starts polling when `active()` says the page is shown. */
export function setupMetrics(/** @type {() => boolean} */ active) {
  const container = /** @type {HTMLElement} */ (document.getElementById("metrics-charts"));
  const status = /** @type {HTMLElement} */ (document.getElementById("metrics-status"));
  const charts = CHARTS.map((spec) => {
    const box = document.createElement("div");
    box.className = "chart";
    box.dataset.testid = `chart-${spec.id}`;
    const title = document.createElement("h3");
    const name = document.createElement("span");
    name.textContent = spec.title;
    const value = document.createElement("span");
    value.className = "value";
    value.dataset.testid = `value-${spec.id}`;
    title.append(name, value);
    const canvas = document.createElement("canvas");
    const legend = document.createElement("div");
    legend.className = "legend";
    legend.textContent = spec.series.map((s) => s.label).join(" / ");
    box.append(title, canvas, legend);
    container.appendChild(box);
    return { spec, canvas, value, history: spec.series.map(() => /** @type {number[]} */ ([])) };
  });
  /** @type {Map<string, number> | null} */
  let before = null;
  let beforeAt = 0;
  let samples = 0;
  async function poll() {
    if (!active()) return;
    try {
      const now = parsePrometheus(await fetchMetrics());
      const at = performance.now();
      const dt = (at - beforeAt) / 1000;
      for (const chart of charts) {
        const values = chart.spec.series.map((s) => s.value(now, before, dt));
        values.forEach((v, i) => {
          chart.history[i].push(v);
          if (chart.history[i].length > HISTORY) chart.history[i].shift();
        });
        chart.value.textContent = values.map((v) => (Number.isFinite(v) ? (Math.round(v * 100) / 100).toString() : "–")).join(" / ");
        draw(chart.canvas, chart.spec, chart.history);
      }
      before = now;
      beforeAt = at;
      ++samples;
      status.dataset.samples = String(samples);
      status.textContent = `Live from /metrics, every second (${samples} samples).`;
    } catch (e) {
      status.textContent = `Cannot read /metrics: ${e instanceof Error ? e.message : e}`;
    }
  }
  setInterval(poll, 1000);
  return poll;
}
