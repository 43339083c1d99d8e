// edgegate dashboard: one websocket, a full snapshot first, then "set" and "append"
// messages; the page re-renders only the part whose key changed.
"use strict";

const state = {};
let prevTraffic = null; // {at, data}: the sample rates are computed against
let rates = {};

const $ = (id) => document.getElementById(id);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    // Styles through the CSSOM: the Content-Security-Policy refuses style attributes.
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
const badge = (text, cls) => el("span", { class: "badge " + cls }, text);
const fmtNum = (n) => n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e4 ? (n / 1e3).toFixed(1) + "k" : String(n);
const ago = (t) => {
  if (!t || t.startsWith("0001")) return "never";
  const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
  return s < 90 ? s.toFixed(0) + " s ago" : (s / 60).toFixed(0) + " min ago";
};

function endpointState(e) {
  if (e.terminating) return badge(e.serving ? "terminating, serving" : "terminating", "warn");
  if (e.ready) return badge("ready", "ok");
  if (e.serving) return badge("serving", "warn");
  return badge("not ready", "bad");
}

function renderFirmware() {
  const f = state.firmware || {};
  let text = `${f.version || "?"} · ${f.mode || "?"} mode · node ${f.node || "?"}`;
  // On the firmware: PID 1 restarted the daemon this many times, by reason.
  const d = state.daemon;
  if (d && d.run > 1) {
    const by = Object.entries(d.restarts || {}).filter(([, n]) => n > 0).map(([r, n]) => `${r} ${n}`).join(", ");
    text += ` · daemon run ${d.run} (restarts: ${by}; last: ${d.lastExit || "?"})`;
  }
  $("firmware").textContent = text;
}

// The connection tracking table: its fill, and what the kernel dropped or evicted once it
// was full; the SYN proxy's counts once it has answered SYNs.
function renderConntrack() {
  const c = state.conntrack;
  const box = $("conntrack");
  box.replaceChildren();
  if (!c) return;
  box.dataset.pressed = String(c.pressed);
  box.append(badge(`conntrack ${fmtNum(c.entries)} / ${fmtNum(c.max)}` + (c.pressed ? " · FULL" : ""), c.pressed ? "bad" : "ok"));
  if (c.dropped || c.earlyDrops) box.append(" ", el("span", { class: "mute" }, `dropped ${fmtNum(c.dropped)} · evicted ${fmtNum(c.earlyDrops)}`));
  if (c.synProxy) box.append(" ", el("span", { class: "mute" }, `synproxy: ${fmtNum(c.synProxy.syns)} SYNs, ${fmtNum(c.synProxy.completed)} completed`));
  const fp = (state.fastPath || {}).devices || [];
  if (fp.length) box.append(" ", badge(`fast path: ${fp.join(", ")}`, "ok"));
}

function renderCluster() {
  const c = state.cluster || {};
  const box = $("cluster");
  box.replaceChildren();
  if (c.mode === "standalone") {
    box.append(el("span", { class: "mute" }, "standalone: no cluster configured"));
    return;
  }
  box.append(
    badge(c.reachable ? "API reachable" : "API unreachable", c.reachable ? "ok" : "bad"), " ",
    badge(c.synced ? "listed" : "not listed", c.synced ? "ok" : "warn"), " ",
    badge(c.watchesHealthy ? "watches open" : "watches broken", c.watchesHealthy ? "ok" : "bad"), " ",
    c.fromCache ? badge("serving from cache", "warn") : "", " ",
    el("span", { class: "mute" }, `last contact ${ago(c.lastContact)} · Lease renewed ${ago(c.leaseRenewed)}`),
    c.problem ? el("div", { class: "error" }, c.problem) : "");
}

function renderServices() {
  const box = $("services");
  const traffic = state.traffic || {};
  // IPVS counts every packet and byte of a connection; nftables only its first packet.
  const full = (state.firmware || {}).mode === "ipvs";
  box.replaceChildren();
  for (const s of state.services || []) {
    const t = traffic[s.name] || { backends: {} };
    const front = [...s.clusterIPs, ...(s.externalIPs || []), ...(s.loadBalancerIPs || [])].join(", ");
    const r = rates[s.name] || {};
    const head = el("h3", {}, s.name + " ",
      el("span", { class: "mute" }, `${s.type} ${s.protocol} ${front}:${s.port}` + (s.nodePort ? ` nodePort ${s.nodePort}` : "") +
        ` · ${fmtNum(t.connections || 0)} connections` + (full ? ` · ${fmtNum(t.packets || 0)} packets · ${fmtNum(t.bytes || 0)} bytes` : "") + (r.total !== undefined ? ` · ${r.total.toFixed(1)}/s` : "")));
    if (s.protection) {
      const refused = t.refused ? ` · refused ${fmtNum(t.refused.rate)} over the rate, ${fmtNum(t.refused.conns)} over the cap` : "";
      head.append(" ", el("span", { class: "badge warn protection", "data-refused-rate": String((t.refused || {}).rate || 0),
        "data-refused-conns": String((t.refused || {}).conns || 0) }, "protected " + s.protection + refused));
    }
    const rows = [el("tr", {}, el("th", {}, "endpoint"), el("th", {}, "state"), el("th", { class: "wide" }, "node"),
      el("th", { class: "num" }, "connections"), ...(full ? [el("th", { class: "num wide" }, "bytes")] : []),
      el("th", { class: "num" }, "/s"), el("th", {}, ""))];
    const max = Math.max(1, ...Object.values(t.backends || {}).map((b) => b.connections));
    for (const e of s.endpoints) {
      const b = (t.backends || {})[e.addr] || { connections: 0, bytes: 0 };
      const rate = (r.backends || {})[e.addr];
      rows.push(el("tr", { class: "endpoint", "data-service": s.name, "data-ep": e.addr, "data-conns": String(b.connections) },
        el("td", {}, e.addr), el("td", {}, endpointState(e)), el("td", { class: "wide mute" }, e.node || ""),
        el("td", { class: "num conns" }, fmtNum(b.connections)), ...(full ? [el("td", { class: "num wide" }, fmtNum(b.bytes))] : []),
        el("td", { class: "num" }, rate === undefined ? "" : rate.toFixed(1)),
        el("td", { style: "width:25%" }, el("div", { class: "bar", style: `width:${(100 * b.connections / max).toFixed(0)}%` }))));
    }
    if (!s.endpoints.length) rows.push(el("tr", {}, el("td", { colspan: full ? "7" : "6", class: "error" }, "no endpoints")));
    box.append(el("div", { class: "service", "data-service": s.name, "data-endpoints": String(s.endpoints.length) }, head, el("table", {}, ...rows)));
  }
}

function onTraffic() {
  const now = performance.now();
  const data = state.traffic || {};
  rates = {};
  if (prevTraffic) {
    const dt = (now - prevTraffic.at) / 1000;
    for (const [name, t] of Object.entries(data)) {
      const p = prevTraffic.data[name];
      if (!p || dt <= 0) continue;
      const r = { total: Math.max(0, t.connections - p.connections) / dt, backends: {} };
      for (const [ep, b] of Object.entries(t.backends || {})) {
        const pb = (p.backends || {})[ep];
        if (pb) r.backends[ep] = Math.max(0, b.connections - pb.connections) / dt;
      }
      rates[name] = r;
    }
  }
  prevTraffic = { at: now, data };
}

function renderSyncs() {
  const syncs = state.syncs || [];
  const c = $("sync-chart");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const max = Math.max(1, ...syncs.map((s) => Math.max(s.ms, s.programmingMs || 0)));
  const w = c.width / Math.max(syncs.length, 60);
  syncs.forEach((s, i) => {
    const x = c.width - (syncs.length - i) * w;
    g.fillStyle = s.error ? "#cf222e" : s.full ? "#3b82c4" : "#7fb3e0";
    const h = Math.max(1, (c.height - 12) * s.ms / max);
    g.fillRect(x, c.height - h, Math.max(1, w - 1), h);
    if (s.programmingMs) {
      g.fillStyle = "#9a6700";
      g.fillRect(x, c.height - (c.height - 12) * s.programmingMs / max - 2, Math.max(1, w - 1), 2);
    }
  });
  g.fillStyle = "#66707a";
  g.font = "10px sans-serif";
  g.fillText(`max ${max.toFixed(1)} ms · dark: full · light: partial · red: failed · line: programming latency`, 4, 10);
  const box = $("syncs");
  const rows = [el("tr", {}, el("th", {}, "time"), el("th", {}, "kind"), el("th", { class: "num" }, "ms"),
    el("th", { class: "num wide" }, "chains"), el("th", { class: "num wide" }, "elements"), el("th", {}, "result"))];
  for (const s of syncs.slice(-8).reverse()) {
    rows.push(el("tr", {}, el("td", {}, new Date(s.time).toLocaleTimeString()), el("td", {}, s.full ? "full" : "partial"),
      el("td", { class: "num" }, s.ms.toFixed(2)), el("td", { class: "num wide" }, String(s.chains)),
      el("td", { class: "num wide" }, String(s.elements)),
      el("td", {}, s.error ? el("span", { class: "error" }, s.error) : badge("ok", "ok"))));
  }
  box.replaceChildren(el("table", {}, ...rows));
}

function renderNetwork() {
  const n = state.network;
  const box = $("network");
  if (!n) { box.textContent = "not available"; return; }
  const rows = (n.links || []).map((l) => el("tr", {}, el("td", {}, l.name), el("td", {}, badge(l.up ? "up" : "down", l.up ? "ok" : "bad")),
    el("td", {}, (l.addrs || []).join(" "))));
  box.replaceChildren(el("table", {}, ...rows), el("pre", {}, (n.routes || []).join("\n")));
}

function logLine(l) {
  return `${new Date(l.time).toLocaleTimeString()} ${l.level} ${l.msg}${l.attrs ? " " + l.attrs : ""}\n`;
}

function renderLogs() {
  $("logs").textContent = (state.logs || []).slice(-200).map(logLine).join("");
  $("logs").scrollTop = 1e9;
}

// The drain action: /healthz fails (load balancers steer away) and the Node turns not
// ready; the rules stay. The button posts with the page's cookie and Origin.
function renderDrain() {
  const d = state.drain || {};
  const b = $("drain");
  $("drain-state").replaceChildren(...(d.draining ? [badge("draining: " + (d.reasons || []).join(", "), "warn")] : []));
  b.hidden = !d.action;
  const operator = (d.reasons || []).includes("operator");
  b.textContent = operator ? "serve again" : "drain";
  b.dataset.on = operator ? "0" : "1";
}

async function drainClicked() {
  const b = $("drain");
  b.disabled = true;
  try {
    const r = await fetch("api/drain", { method: "POST", body: new URLSearchParams({ on: b.dataset.on }) });
    if (!r.ok) $("drain-state").replaceChildren(badge("drain refused: " + (await r.text()).trim(), "bad"));
  } finally {
    b.disabled = false;
  }
}

// LoadBalancer IPs: the gateways on the segment, the addresses this one answers ARP/NDP
// for (and on which interfaces), and which peer owns each other address.
function renderLB() {
  const lb = state.loadBalancer;
  $("lb-section").hidden = !lb;
  if (!lb) return;
  const sp = lb.speaker || {};
  const rows = [el("tr", {}, el("th", {}, "address"), el("th", {}, "announced by"), el("th", { class: "wide" }, "interfaces"))];
  for (const [a, ifs] of Object.entries(sp.owned || {})) rows.push(el("tr", { class: "lb-owned", "data-addr": a }, el("td", {}, a), el("td", {}, badge("this gateway", "ok")), el("td", { class: "wide" }, ifs.join(", "))));
  for (const [a, o] of Object.entries(sp.others || {})) rows.push(el("tr", { "data-addr": a }, el("td", {}, a), el("td", {}, o), el("td", { class: "wide mute" }, "")));
  const peers = (lb.peers || []).map((p) => `${p.name} ${p.state}${p.draining ? " draining" : ""}`).join(", ") || "none heard";
  $("lb").replaceChildren(
    el("p", { class: "mute" }, `members: ${(sp.members || []).join(", ") || "none"} · peers: ${peers}` + (lb.allocating ? " · allocating" : "") + ` · pools: ${lb.pools || "none"}`),
    ...(sp.error ? [el("p", { class: "error" }, sp.error)] : []),
    el("table", {}, ...rows));
}

// Firmware slots and updates: which slot runs and which boots next, a trial in progress,
// the update being received, and the history. The form uploads a signed bundle.
function renderUpdate() {
  const u = state.update;
  $("update-section").hidden = !u;
  if (!u) return;
  $("update-form").hidden = !u.available;
  const rows = [el("tr", {}, el("th", {}, "slot"), el("th", {}, "firmware"), el("th", { class: "wide" }, "state"))];
  for (const s of u.slots || []) {
    rows.push(el("tr", { "data-slot": s.slot }, el("td", {}, s.slot.toUpperCase()), el("td", {}, s.firmware || "-"),
      el("td", { class: "wide" }, s.state, s.running ? badge("running", "ok") : "", s.bootsNext ? badge("boots next", "warn") : "")));
  }
  const out = [el("p", { class: "mute" }, `${u.version} on ${u.board}` + (u.slot ? `, slot ${u.slot.toUpperCase()}` : ""))];
  if (!u.available) out.push(el("p", { class: "mute" }, "updates unavailable: " + u.problem));
  if (u.trial) out.push(el("p", {}, badge(`trial boot ${u.trial.boot} of ${u.trial.tries}`, "warn"), ` commits when healthy, else reboots ${ago(u.trial.deadline).replace(" ago", "")} · waiting for: ${u.trial.waiting || "-"}`));
  const p = u.pending;
  if (p) out.push(el("p", { id: "update-pending" }, badge(p.phase, "warn"), ` ${p.from.version} → ${p.to.version || "?"} (slot ${p.to.slot.toUpperCase()}) · ${fmtNum(p.bytes)} bytes from ${p.source}`));
  if (u.rebooting) out.push(el("p", {}, badge("rebooting", "warn")));
  out.push(el("table", {}, ...rows));
  const hist = (u.history || []).slice(0, 5).map((a) => el("li", {}, badge(a.phase, a.phase === "committed" ? "ok" : "bad"),
    ` ${a.started.slice(0, 19).replace("T", " ")} ${a.from.version} → ${a.to.version || "?"} (${a.source})`, a.reason ? el("div", { class: "error" }, a.reason) : ""));
  if (hist.length) out.push(el("ul", { id: "update-history" }, ...hist));
  $("update").replaceChildren(...out);
}

async function updateSubmitted(ev) {
  ev.preventDefault();
  const f = $("bundle-file").files[0];
  if (!f) return;
  const b = $("update-form").querySelector("button");
  b.disabled = true;
  try {
    const r = await fetch("api/update", { method: "POST", body: f });
    const ans = await r.json().catch(() => ({}));
    if (!r.ok) $("update").append(el("p", { class: "error" }, "update refused: " + (ans.error || r.status)));
  } finally {
    b.disabled = false;
  }
}

const renderers = {
  loadBalancer: renderLB, update: renderUpdate,
  drain: renderDrain, conntrack: renderConntrack, fastPath: renderConntrack, firmware: renderFirmware, daemon: renderFirmware, cluster: renderCluster, services: renderServices,
  traffic: () => { onTraffic(); renderServices(); }, syncs: renderSyncs, network: renderNetwork, logs: renderLogs,
};
const limits = { syncs: 120, logs: 500 };

function apply(m) {
  if (m.type === "snapshot") {
    for (const k of Object.keys(state)) delete state[k];
    Object.assign(state, m.state);
    prevTraffic = null;
    if (state.traffic) onTraffic();
    for (const r of Object.values(renderers)) r();
  } else if (m.type === "set") {
    state[m.key] = m.value;
    (renderers[m.key] || (() => {}))();
  } else if (m.type === "append") {
    const l = (state[m.key] = state[m.key] || []);
    l.push(m.value);
    if (l.length > (limits[m.key] || 500)) l.shift();
    if (m.key === "logs") {
      const pre = $("logs");
      pre.append(logLine(m.value));
      pre.scrollTop = 1e9;
    } else (renderers[m.key] || (() => {}))();
  }
}

function setLink(text, cls) {
  const b = $("link");
  b.textContent = text;
  b.className = "badge " + cls;
  b.dataset.state = text;
}

let backoff = 500;
function connect(token) {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  // The cookie set with the page carries the token; the query is for browsers that drop it.
  const ws = new WebSocket(`${proto}//${location.host}${location.pathname.replace(/[^/]*$/, "")}api/ws` + (token ? "?token=" + encodeURIComponent(token) : ""));
  ws.onopen = () => { backoff = 500; setLink("live", "ok"); };
  ws.onmessage = (ev) => apply(JSON.parse(ev.data));
  ws.onclose = () => {
    setLink("reconnecting", "bad");
    setTimeout(() => connect(token), backoff);
    backoff = Math.min(backoff * 2, 10000);
  };
}

const params = new URLSearchParams(location.search);
const token = params.get("token") || "";
if (token) {
  // Keep the token out of the address bar, screenshots and history.
  params.delete("token");
  history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
}
$("drain").addEventListener("click", drainClicked);
$("update-form").addEventListener("submit", updateSubmitted);
connect(token);
setInterval(renderCluster, 5000); // the "ago" times move without messages
// The hub pushes counters only when they change: silence means a rate of zero.
setInterval(() => {
  if (prevTraffic && performance.now() - prevTraffic.at > 1500) { onTraffic(); renderServices(); }
}, 1000);
