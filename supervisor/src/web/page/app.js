// Lucebox status page: renders /api/v1/status, follows /api/v1/stream (SSE) and keeps the
// charts' history. Data is written with textContent only, never parsed as HTML.
"use strict";

const HISTORY_MS = 10 * 60 * 1000;
const HISTORY_MAX = 600;
const COLORS = ["#0b5cad", "#c62828", "#1a7f37", "#b35900", "#7b3fbf", "#00838f"];
const history = [];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
const fmt = (v, unit, digits = 0) => (v === null || v === undefined ? "—" : v.toFixed(digits) + unit);
const gib = (mib) => (mib / 1024).toFixed(1) + " GiB";
const time = (ms) => new Date(ms).toLocaleTimeString([], { hourCycle: "h23" });

function stateText(s) {
  switch (s.state) {
    case "loading": return s.percent == null ? "loading" : `loading ${s.percent}%`;
    case "unhealthy": return `unhealthy (${s.failed_probes} failed probes)`;
    case "restarting": return `restarting in ${Math.ceil(s.in_ms / 1000)} s`;
    case "crash-looping": return s.fell_back_to ? `crash-looping, fell back to ${s.fell_back_to}` : "crash-looping";
    default: return s.state;
  }
}

function renderEngines(engines) {
  const box = document.getElementById("engines");
  const names = Object.keys(engines);
  if (names.length === 0) {
    box.replaceChildren(el("p", { class: "muted" }, "No engine running. The page keeps updating; engines appear here when the supervisor starts them."));
    return;
  }
  box.replaceChildren(...names.map((name) => {
    const e = engines[name];
    const load = e.load || {};
    const card = el("article", { class: `engine ${e.state.state}`, "data-engine": name },
      el("h3", {}, el("span", {}, name), el("span", { class: "state" }, stateText(e.state))),
      el("dl", {},
        el("dt", {}, "Profile"), el("dd", {}, e.profile),
        el("dt", {}, "Engine build"), el("dd", {}, e.variant),
        el("dt", {}, "Tokens/s"), el("dd", { class: "tokens" }, e.load && !load.from_connections ? load.tokens_per_s.toFixed(1) : "—"),
        el("dt", {}, "Queue"), el("dd", {}, !e.load ? "—" : load.from_connections
          ? `${load.requests_processing} in flight (from its connections: this engine publishes no queue)`
          : `${load.requests_processing} running, ${load.requests_deferred} waiting`),
        el("dt", {}, "Runs as"), el("dd", {}, `${e.runtime}${e.instance ? " " + e.instance.slice(0, 12) : ""}, port ${e.port}`),
        el("dt", {}, "Restarts"), el("dd", {}, e.restarts),
        el("dt", {}, "Since"), el("dd", {}, time(e.since_unix_ms))));
    if (e.fallback_reason) card.append(el("p", { class: "note" }, "Fallback: " + e.fallback_reason));
    if (e.last_exit) card.append(el("p", { class: "note" }, "Last exit: " + e.last_exit));
    return card;
  }));
}

function renderDevices(hw, thermal) {
  const body = document.querySelector("#devices tbody");
  if (!hw) return;
  body.replaceChildren(...hw.devices.map((d) => {
    const t = thermal[d.id] || {};
    const temp = t.junction_c ?? d.telemetry.temperature_c;
    const power = t.power_w ?? d.telemetry.power_w;
    const fan = t.fan_duty_pct ?? d.telemetry.fan_speed_pct;
    const row = el("tr", { "data-device": d.id },
      el("td", {}, d.id), el("td", {}, d.model), el("td", {}, d.arch || "—"),
      el("td", {}, gib(d.memory.usable_mib)),
      el("td", {}, [d.driver.name, d.driver.version].filter(Boolean).join(" ") || "—"),
      el("td", {}, fmt(temp, " °C")), el("td", {}, fmt(power, " W")), el("td", {}, fmt(fan, " %")));
    if (d.warnings.length) row.title = d.warnings.join("\n");
    return row;
  }));
  const h = hw.host;
  document.getElementById("host").textContent =
    `${h.cpu_model}, ${h.cores} cores, ${gib(h.memory_mib)} memory${h.in_container ? ", in a container" : ""}` +
    (hw.warnings.length ? ` · ${hw.warnings.length} warning(s)` : "");
}

function renderThermal(thermal) {
  const ids = Object.keys(thermal);
  if (ids.length === 0) return;
  document.querySelector("#thermal tbody").replaceChildren(...ids.map((id) => {
    const t = thermal[id];
    return el("tr", {},
      el("td", {}, id), el("td", {}, `${fmt(t.junction_c, " °C")} / ${fmt(t.limit_c, " °C")}`),
      el("td", {}, fmt(t.predicted_peak_c, " °C", 1)),
      el("td", {}, `${fmt(t.fan_duty_pct, " %")}${t.fan_rpm != null ? ` (${t.fan_rpm.toFixed(0)} rpm)` : ""}`),
      el("td", {}, `${t.mode} via ${t.actuator}`), el("td", { class: t.safety ? "warn" : "" }, t.safety || "ok"),
      el("td", {}, fmt(t.loop_cpu_pct, " %", 3)),
      el("td", {}, t.why || "—"));
  }));
}

function renderPlan(plan) {
  if (!plan) return;
  const items = plan.groups.map((g) => el("li", {},
    `${g.name}: ${g.choice.profile} on ${g.choice.variant} (${g.devices.join(", ")})`,
    g.proof.state === "failed" ? ` — smoke test failed: ${g.proof.reason}` : ""));
  for (const u of plan.unplanned) items.push(el("li", { class: "muted" }, `${u.device}: not used — ${u.reason}`));
  document.getElementById("plan").replaceChildren(el("ul", {}, ...items));
}

function renderOta(ota) {
  const s = ota.state;
  let text = s.state === "idle" ? "Up to date" : `${s.state} v${s.version}${s.reason ? ": " + s.reason : ""}`;
  if (ota.active_set) text += ` · active set ${ota.active_set}`;
  if (ota.progress_pct != null) text += ` · download ${ota.progress_pct}%`;
  if (ota.lock) text += ` · locked by ${ota.lock}`;
  document.getElementById("ota").textContent = text;
}

function renderEvents(events) {
  const list = events.slice(-30).reverse().map((e) =>
    el("li", { class: e.level }, el("span", {}, time(e.unix_ms)), el("span", { class: "src" }, e.source), el("span", {}, e.message)));
  document.getElementById("events").replaceChildren(...list);
}

function sampleOf(status, now) {
  const s = { unix_ms: now, junction_c: {}, fan_duty_pct: {}, tokens_per_s: {} };
  for (const d of status.hardware ? status.hardware.devices : []) {
    if (d.telemetry.temperature_c != null) s.junction_c[d.id] = d.telemetry.temperature_c;
    if (d.telemetry.fan_speed_pct != null) s.fan_duty_pct[d.id] = d.telemetry.fan_speed_pct;
  }
  for (const [id, t] of Object.entries(status.thermal)) {
    if (t.junction_c != null) s.junction_c[id] = t.junction_c;
    if (t.fan_duty_pct != null) s.fan_duty_pct[id] = t.fan_duty_pct;
  }
  for (const [name, e] of Object.entries(status.engines)) s.tokens_per_s[name] = e.load ? e.load.tokens_per_s : 0;
  return s;
}

function record(sample) {
  const last = history[history.length - 1];
  if (last && sample.unix_ms - last.unix_ms < 1000) return;
  history.push(sample);
  while (history.length > HISTORY_MAX || (history.length && history[0].unix_ms < sample.unix_ms - HISTORY_MS)) history.shift();
}

function drawChart(key, field) {
  const canvas = document.getElementById("chart-" + key);
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const names = [...new Set(history.flatMap((s) => Object.keys(s[field])))];
  const values = history.flatMap((s) => Object.values(s[field]));
  const legend = document.getElementById("legend-" + key);
  const styles = getComputedStyle(document.body);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = styles.color;
  if (values.length === 0) {
    ctx.fillText("no readings yet", 8, h / 2);
    legend.replaceChildren();
    return;
  }
  let lo = Math.min(0, ...values), hi = Math.max(...values, 1);
  hi += (hi - lo) * 0.1;
  const now = history[history.length - 1].unix_ms, from = now - HISTORY_MS;
  const x = (t) => 30 + ((t - from) / HISTORY_MS) * (w - 36);
  const y = (v) => h - 14 - ((v - lo) / (hi - lo)) * (h - 22);
  ctx.strokeStyle = "rgba(128,128,128,.3)";
  ctx.lineWidth = 1;
  for (const v of [lo, (lo + hi) / 2, hi]) {
    ctx.beginPath(); ctx.moveTo(30, y(v)); ctx.lineTo(w - 4, y(v)); ctx.stroke();
    ctx.fillText(v.toFixed(0), 2, y(v) + 4);
  }
  ctx.fillText("−10 min", 30, h - 2);
  ctx.fillText("now", w - 26, h - 2);
  ctx.lineWidth = 2;
  names.forEach((name, i) => {
    ctx.strokeStyle = COLORS[i % COLORS.length];
    ctx.beginPath();
    let started = false;
    for (const s of history) {
      const v = s[field][name];
      if (v === undefined) { started = false; continue; }
      if (started) ctx.lineTo(x(s.unix_ms), y(v)); else ctx.moveTo(x(s.unix_ms), y(v));
      started = true;
    }
    ctx.stroke();
    const last = history[history.length - 1][field][name];
    if (last !== undefined) {
      ctx.fillStyle = COLORS[i % COLORS.length];
      ctx.beginPath(); ctx.arc(x(now), y(last), 3, 0, 2 * Math.PI); ctx.fill();
    }
  });
  legend.replaceChildren(...names.map((n, i) => {
    const swatch = el("i", {});
    swatch.style.background = COLORS[i % COLORS.length]; // CSSOM, allowed by the page's policy
    return el("span", {}, swatch, n);
  }));
}

function drawCharts() {
  drawChart("temp", "junction_c");
  drawChart("fan", "fan_duty_pct");
  drawChart("tokens", "tokens_per_s");
}

function render(status) {
  renderEngines(status.engines);
  renderDevices(status.hardware, status.thermal);
  renderThermal(status.thermal);
  renderPlan(status.plan);
  renderOta(status.ota);
  renderEvents(status.events);
  record(sampleOf(status, Date.now()));
  drawCharts();
  document.getElementById("updated").textContent = "updated " + time(Date.now());
}

function setLive(on) {
  const live = document.getElementById("live");
  live.className = "live " + (on ? "on" : "connecting");
  live.textContent = on ? "live" : "reconnecting…";
}

async function start() {
  try {
    const [version, past] = await Promise.all([
      fetch("/api/v1/version").then((r) => r.json()),
      fetch("/api/v1/history").then((r) => r.json()),
    ]);
    document.getElementById("version").textContent = `lucebox ${version.version}`;
    for (const s of past) record(s);
  } catch (e) { /* the stream below still brings the status */ }
  const stream = new EventSource("/api/v1/stream");
  stream.addEventListener("status", (e) => { setLive(true); render(JSON.parse(e.data)); });
  stream.onerror = () => setLive(false);
  window.addEventListener("resize", drawCharts);
}

start();
