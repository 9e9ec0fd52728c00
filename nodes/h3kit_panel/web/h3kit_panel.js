// h3kit's panel inside ComfyUI (issue #44): a sidebar tab that shows what the open workflow costs on this
// machine, and a gate in front of Run that stops a workflow that does not fit before any weight is loaded.
//
// Everything it shows comes from the pack's own routes (nodes/h3kit_panel): GET /h3kit/status (machine,
// profile, calibration, presets), POST /h3kit/estimate (the open graph as an API prompt -> minutes, peaks, a
// fix), POST/GET /h3kit/preset (h3kit's `apply --preset`, run by the server). The panel does no arithmetic of
// its own: the figures are the planner's, so the panel and `h3kit plan` never disagree.
//
// Choices made on purpose:
// - Run is gated in app.queuePrompt, not api.queuePrompt: cancelling there has no side effects (no error
//   dialog, no "queued" notice, no seed bump). A prompt the user lets through gets the guard node's
//   `h3kit_queue_anyway` input in api.queuePrompt, which is where the outgoing prompt is built.
// - The server refuses such a prompt itself (its queue guard), so a client without this file is safe too.
// - Plain DOM, text through textContent only: every string from the server is data, never markup.
// - ComfyUI imports every *.js under web/ as an extension, so this is the only .js file here.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const POLL_MS = 1500;          // how often the open panel looks for an edited graph
const PRESET_POLL_MS = 1000;   // how often a running preset switch is asked for news
const GB = 1e9;                 // decimal GB, as the pack's sentences (h3k_cost.gb) and h3kit's terminal count them
const FRAME_WIDGETS = ["length", "frames", "num_frames", "video_frames"];

const state = {
  status: null,         // the last GET /h3kit/status document
  statusError: null,    // a sentence when it could not be had
  estimate: null,       // the last POST /h3kit/estimate answer for the open graph
  estimateError: null,  // the server's sentence for a graph it cannot estimate (no H3 node, ...)
  lastPromptKey: null,  // the graph the estimate is for, so an unchanged graph is not posted again
  presetJob: null,      // the last GET /h3kit/preset document
  approvedBatches: 0,   // prompts the user let through with "Queue anyway", not sent yet
  approvedGuard: null,  // the guard node those prompts carry the flag on
};
let ui = null;          // the open panel's elements, or null

// ---- small helpers

function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

async function callJson(path, options = {}) {
  // {ok, status, doc}; doc is null when the answer is not JSON (a route that is not there answers 404 HTML)
  const res = await api.fetchApi(path, options);
  let doc = null;
  try { doc = await res.json(); } catch { doc = null; }
  return { ok: res.ok, status: res.status, doc };
}

function postJson(path, body) {
  return callJson(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

const gb = (bytes) => (bytes / GB).toFixed(1);

function duration(minutes) {
  if (minutes == null) return "unknown";
  if (minutes < 60) return `${Math.max(1, Math.round(minutes))} min`;
  if (minutes < 48 * 60) return `${Math.floor(minutes / 60)} h ${Math.round(minutes % 60)} min`;
  return `${Math.round(minutes / (24 * 60))} days`;
}

function workload(doc) {
  const [w, h_] = doc.canvas || [];
  return `${w}x${h_}, ${doc.frames} frames, ${doc.steps} steps`;
}

function peaks(doc, budget) {
  // "RAM 12.1 of 13.2 GB" and the GPU's, when this machine has one
  const parts = [];
  if (budget?.gpu_bytes) parts.push(`GPU ${gb(doc.peak_gpu_bytes || 0)} of ${gb(budget.gpu_bytes)} GB`);
  if (budget?.ram_bytes) parts.push(`RAM ${gb(doc.peak_ram_bytes || 0)} of ${gb(budget.ram_bytes)} GB`);
  return parts.join(", ");
}

function figureLines(est) {
  return [
    `${workload(est)}${est.cfg != null ? `, cfg ${est.cfg}` : ""}`,
    `About ${duration(est.minutes)} a clip (target ${duration(est.target_minutes)})`,
    `Peaks: ${peaks(est, est.budget)}`,
  ];
}

function fixLine(est) {
  const fix = est.fix;
  if (!fix) return null;
  return `Fits at ${workload(fix)}: about ${duration(fix.minutes)} a clip, peaks ${peaks(fix, est.budget)}.`;
}

// ---- the estimate

async function estimateFor(output) {
  // The answer for one API prompt, or {error} with the server's sentence; null when there is no answer at all
  try {
    const { ok, doc } = await postJson("/h3kit/estimate", { prompt: output });
    if (ok && doc) return doc;
    return { error: doc?.error || "h3kit's estimate route did not answer (is the h3kit pack loaded?)." };
  } catch (err) {
    console.warn("h3kit: estimate failed", err);
    return null;
  }
}

async function refreshEstimate(force = false) {
  let output;
  try {
    ({ output } = await app.graphToPrompt());
  } catch {
    return;  // a graph that is being loaded or has a broken link: the next poll tries again
  }
  const key = JSON.stringify(output);
  if (!force && key === state.lastPromptKey) return;
  state.lastPromptKey = key;
  const answer = await estimateFor(output);
  if (answer === null) return;
  state.estimate = answer.error ? null : answer;
  state.estimateError = answer.error || null;
  renderEstimate();
}

// ---- the fix: the fix's canvas, frames and steps on the widgets the server named

function fixTargets(est) {
  // [node id, input name] of each value: the server's target_inputs (a primitive's "value" too), else the nodes
  // it named with the usual input names
  const at = est.target_inputs || {}, t = est.targets || {};
  return {
    width: at.width || [t.canvas, "width"], height: at.height || [t.canvas, "height"],
    frames: at.frames || [t.frames, null], steps: at.steps || [t.steps, "steps"],
  };
}

function setWidget([nodeId, name], value) {
  const node = nodeId == null ? null : app.graph.getNodeById(nodeId);
  const names = name ? [name] : FRAME_WIDGETS;
  const widget = node?.widgets?.find((w) => names.includes(w.name));
  if (!widget) return false;
  widget.value = value;
  return true;
}

function applyFix(est) {
  // Returns the names of what could not be set (a widget fed by a link, a node inside a subgraph)
  const fix = est.fix, at = fixTargets(est), missed = [];
  if (!fix) return missed;
  const wanted = { width: fix.canvas?.[0], height: fix.canvas?.[1], frames: fix.frames, steps: fix.steps };
  for (const [key, value] of Object.entries(wanted)) {
    if (value != null && !setWidget(at[key], value)) missed.push(key);
  }
  app.graph.setDirtyCanvas(true, true);
  app.graph.change?.();
  if (missed.length) toast("warn", `h3kit could not set the ${missed.join(", ")} here; ${fixLine(est)}`);
  refreshEstimate(true);
  return missed;
}

function toast(severity, detail) {
  app.extensionManager?.toast?.add({ severity, summary: "h3kit", detail, life: 8000 });
}

// ---- the panel

function render(el) {
  const root = h("div", { id: "h3kit-panel", class: "h3kit-panel" });
  ui = {
    root,
    machine: h("p", { id: "h3kit-machine", class: "h3kit-muted" }),
    estimate: h("section", { id: "h3kit-estimate" }),
    warning: h("section", { id: "h3kit-warning", class: "h3kit-warning", hidden: "" }),
    calibration: h("section", { id: "h3kit-calibration" }),
    presets: h("section", { id: "h3kit-presets" }),
  };
  root.append(h("h3", { text: "h3kit" }), ui.machine, ui.estimate, ui.warning, ui.calibration, ui.presets);
  el.replaceChildren(root);
  renderStatus();
  renderEstimate();
  refreshStatus();
  state.lastPromptKey = null;
  refreshEstimate();
  const timer = setInterval(() => {
    if (!root.isConnected) { clearInterval(timer); if (ui?.root === root) ui = null; return; }
    if (root.getClientRects().length) refreshEstimate();  // a tab kept in the page while closed: no work
  }, POLL_MS);
}

async function refreshStatus() {
  try {
    const { ok, status, doc } = await callJson("/h3kit/status");
    state.status = ok ? doc : null;
    state.statusError = ok ? null : (doc?.error || `h3kit's status route answered HTTP ${status} (is the h3kit pack loaded?).`);
  } catch (err) {
    state.status = null;
    state.statusError = `h3kit's status route did not answer: ${err}`;
  }
  if (state.status?.preset_job?.state === "running" && !presetPolling) pollPreset();
  renderStatus();
}

function renderStatus() {
  if (!ui) return;
  const s = state.status;
  if (!s) {
    ui.machine.textContent = state.statusError || "Reading h3kit's status...";
    return;
  }
  const guard = s.queue_guard === "warn" ? "warns only" : "refuses what does not fit";
  ui.machine.replaceChildren(
    h("span", { id: "h3kit-machine-text", text: s.machine || "" }),
    h("br"), h("span", { text: `Profile ${s.profile}, h3kit ${s.h3kit_version}; the queue guard ${guard}.` }));
  for (const problem of [s.profile_problem, s.cost && !s.cost.available && s.cost.problem]) {
    if (problem) ui.machine.append(h("br"), h("span", { class: "h3kit-bad", text: problem }));
  }
  renderCalibration(s);
  renderPresets(s);
}

function renderEstimate() {
  if (!ui) return;
  const est = state.estimate;
  const box = ui.estimate;
  box.replaceChildren(h("h4", { text: "This workflow" }));
  if (!est) {
    box.append(h("p", { id: "h3kit-estimate-text", class: "h3kit-muted", text: state.estimateError || "Reading the workflow..." }));
    ui.warning.hidden = true;
    return;
  }
  const nodes = est.h3_nodes || [];
  box.append(h("p", { id: "h3kit-nodes", class: "h3kit-muted", title: nodes.map((n) => `${n.id}: ${n.class_type}`).join("\n"),
    text: `H3 nodes: ${nodes.map((n) => n.title || n.class_type).join(", ") || "none"}` }));
  // with a warning the sentence is the warning's, not said twice
  if (!warned(est)) box.append(h("p", { id: "h3kit-estimate-text", class: "h3kit-sentence", text: est.message || "" }));
  if (est.available !== false) {
    const list = h("ul", { id: "h3kit-figures" });
    for (const line of figureLines(est)) list.append(h("li", { text: line }));
    box.append(list);
  }
  for (const note of est.notes || []) box.append(h("p", { class: "h3kit-note", text: note }));
  renderWarning(est);
}

function warned(est) {
  return est.available !== false && (est.fits === false || Boolean(est.slow));
}

function renderWarning(est) {
  const box = ui.warning;
  const tooBig = est.available !== false && est.fits === false;
  box.hidden = !warned(est);
  if (box.hidden) return;
  box.classList.toggle("h3kit-slow", !tooBig);
  const title = tooBig ? "This workflow does not fit this machine" :
    `Slower than your target of ${duration(est.target_minutes)} a clip`;
  box.replaceChildren(h("strong", { text: title }), h("p", { text: est.message || "" }));
  const fix = fixLine(est);
  if (fix) {
    box.append(h("p", { id: "h3kit-fix-text", text: fix }),
      h("button", { id: "h3kit-apply-fix", class: "h3kit-button", text: "Apply fix", onclick: () => applyFix(est) }));
  } else if (tooBig) {
    box.append(h("p", { text: "h3kit found no smaller canvas that fits; lower the frames or pick a smaller preset." }));
  }
}

function renderCalibration(s) {
  const box = ui.calibration;
  box.replaceChildren(h("h4", { text: "Calibration" }));
  const cal = s.calibration;
  if (!cal) {
    box.append(h("p", { class: "h3kit-muted", text: "Not calibrated yet: the figures are h3kit's tables. Run 'h3kit calibrate' to measure this machine." }));
    return;
  }
  if (cal.created) box.append(h("p", { class: "h3kit-muted", text: `Measured ${cal.created}` }));
  box.append(h("pre", { id: "h3kit-calibration-lines", class: "h3kit-lines", text: (cal.lines || []).join("\n") }));
  if (cal.report_html) {
    box.append(h("a", { id: "h3kit-report", href: api.apiURL("/h3kit/report"), target: "_blank", rel: "noopener", text: "Open the calibration report" }));
  }
}

// ---- the preset switch

let presetPolling = false;

function renderPresets(s) {
  const box = ui.presets;
  const select = h("select", { id: "h3kit-preset" });
  for (const name of s.presets || []) {
    const option = h("option", { value: name, text: name });
    if (name === s.preset) option.selected = true;
    select.append(option);
  }
  const button = h("button", { id: "h3kit-preset-apply", class: "h3kit-button", text: "Switch preset" });
  button.addEventListener("click", () => startPreset(select.value));
  if (presetPolling) button.disabled = true;
  box.replaceChildren(h("h4", { text: "Preset" }),
    h("p", { class: "h3kit-muted", text: `Now: ${s.preset}. Switching runs 'h3kit apply --preset' and rewrites the workflows.` }),
    h("div", { class: "h3kit-row" }, select, button),
    h("pre", { id: "h3kit-preset-log", class: "h3kit-lines", hidden: "" }),
    h("p", { id: "h3kit-preset-message" }));
  renderPresetJob();
}

function renderPresetJob() {
  const job = state.presetJob || state.status?.preset_job;
  if (!ui || !job) return;
  const log = ui.root.querySelector("#h3kit-preset-log");
  const message = ui.root.querySelector("#h3kit-preset-message");
  if (!log || !message) return;
  log.hidden = !(job.lines || []).length;
  log.textContent = (job.lines || []).join("\n");
  log.scrollTop = log.scrollHeight;
  let text = job.message || (job.state === "running" ? `Switching to ${job.preset}...` : "");
  if (job.state === "done" && !/restart/i.test(text)) {  // the server's sentence usually says it already
    text += job.restart_needed ? " Restart ComfyUI to use it." : " No restart needed.";
  }
  message.textContent = text.trim();
  message.dataset.state = job.state;  // running | done | failed, for whoever waits on the switch
  message.className = job.state === "failed" ? "h3kit-bad" : (job.restart_needed ? "h3kit-restart" : "");
}

async function startPreset(name) {
  const { ok, doc, status } = await postJson("/h3kit/preset", { preset: name });
  if (!ok) {
    state.presetJob = { state: "failed", preset: name, lines: [], message: doc?.error || `HTTP ${status}` };
    renderPresetJob();
    return;
  }
  state.presetJob = doc?.state ? doc : { state: "running", preset: name, lines: [] };
  pollPreset();
}

async function pollPreset() {
  presetPolling = true;
  if (ui && state.status) renderPresets(state.status);  // the button stays off while it runs
  try {
    for (;;) {
      const { ok, doc } = await callJson("/h3kit/preset");
      if (ok && doc) state.presetJob = doc;
      renderPresetJob();
      if (!ok || !doc || doc.state !== "running") break;
      await new Promise((done) => setTimeout(done, PRESET_POLL_MS));
    }
  } finally {
    presetPolling = false;
  }
  await refreshStatus();  // the new preset, its defaults, the workflows it wrote
  state.lastPromptKey = null;
}

// ---- the gate in front of Run

function askUser(est) {
  // h3kit's own dialog (ComfyUI's confirm has fixed Cancel/Confirm labels): resolves "fix", "anyway" or "cancel"
  return new Promise((resolve) => {
    const overlay = h("div", { id: "h3kit-dialog", class: "h3kit-overlay", role: "dialog", "aria-modal": "true", "aria-labelledby": "h3kit-dialog-title" });
    const close = (choice) => { overlay.remove(); resolve(choice); };
    const list = h("ul", { id: "h3kit-dialog-figures" });
    for (const line of figureLines(est)) list.append(h("li", { text: line }));
    const fix = fixLine(est);
    const buttons = h("div", { class: "h3kit-row h3kit-buttons" });
    if (fix) buttons.append(h("button", { id: "h3kit-dialog-apply-fix", class: "h3kit-button h3kit-primary", text: "Apply fix", onclick: () => close("fix") }));
    buttons.append(
      h("button", { id: "h3kit-queue-anyway", class: "h3kit-button", text: "Queue anyway", onclick: () => close("anyway") }),
      h("button", { id: "h3kit-dialog-cancel", class: "h3kit-button", text: "Cancel", onclick: () => close("cancel") }));
    const box = h("div", { class: "h3kit-dialog-box" },
      h("h3", { id: "h3kit-dialog-title", text: "h3kit: this workflow does not fit this machine" }),
      h("p", { id: "h3kit-dialog-message", text: est.message || "" }), list,
      h("p", { id: "h3kit-dialog-fix", text: fix || "h3kit found no smaller canvas that fits." }),
      h("p", { class: "h3kit-muted", text: "Nothing has been queued. Queue anyway sends it as it is: it may run out of memory." }),
      buttons);
    overlay.append(box);
    // keys typed here are the dialog's, not ComfyUI's shortcuts
    overlay.addEventListener("keydown", (ev) => { ev.stopPropagation(); if (ev.key === "Escape") close("cancel"); });
    document.body.append(overlay);
    buttons.querySelector("button")?.focus();
  });
}

function gateQueue() {
  const queueApp = app.queuePrompt.bind(app);
  app.queuePrompt = async function (number, batchCount = 1, options = {}) {
    let output;
    try { ({ output } = await app.graphToPrompt()); } catch { return queueApp(number, batchCount, options); }
    const est = await estimateFor(output);
    if (!est || est.error || est.available === false || est.fits !== false) return queueApp(number, batchCount, options);
    state.estimate = est;
    state.lastPromptKey = JSON.stringify(output);
    renderEstimate();
    if (state.status?.queue_guard === "warn") {
      toast("warn", est.message);
      return queueApp(number, batchCount, options);
    }
    if (document.getElementById("h3kit-dialog")) return false;  // Run pressed again while the dialog asks
    const choice = await askUser(est);
    if (choice === "fix") applyFix(est);
    if (choice !== "anyway") return false;  // nothing sent to /prompt, so nothing loads
    state.approvedBatches += Math.max(1, batchCount);
    state.approvedGuard = est.guard_node;
    try {
      return await queueApp(number, batchCount, options);
    } finally {
      // batches the app's queue loop did not send (it stopped at an error) are approved no more
      if (!app.processingQueue) state.approvedBatches = 0;
    }
  };

  const queueApi = api.queuePrompt.bind(api);
  api.queuePrompt = async function (number, data, options) {
    const guard = state.approvedGuard;
    if (state.approvedBatches > 0 && guard != null && data?.output?.[guard]) {
      state.approvedBatches -= 1;
      data.output[guard].inputs.h3kit_queue_anyway = true;
    }
    return queueApi(number, data, options);
  };
}

// ---- registration

function addStyles() {
  const link = h("link", { rel: "stylesheet", href: new URL("./h3kit_panel.css", import.meta.url).href });
  document.head.append(link);
}

app.registerExtension({
  name: "h3kit.panel",
  async setup() {
    addStyles();
    app.extensionManager.registerSidebarTab({
      id: "h3kit", icon: "pi pi-bolt", title: "h3kit", tooltip: "h3kit: what this workflow costs here", type: "custom", render,
    });
    gateQueue();
    refreshStatus();  // the gate needs queue_guard before the first Run
    window.__h3kit_ready = true;
  },
});
