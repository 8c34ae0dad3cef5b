// Live dashboard: polls the console's samples every second and redraws uPlot charts in the theme's colours.
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  if (!root) return;
  const url = root.dataset.url;
  const css = () => getComputedStyle(document.documentElement);
  const palette = () => [css().getPropertyValue("--accent").trim() || "#b5651d", css().getPropertyValue("--focus").trim() || "#2f6feb", css().getPropertyValue("--danger").trim() || "#b42318", css().getPropertyValue("--muted").trim() || "#6b6b6b"];
  const CHARTS = {
    throughput: [["tokens_per_s", "generated"], ["prompt_tokens_per_s", "prompt"]],
    queue: [["running", "running"], ["waiting", "waiting"]],
    kv: [["kv_pct", "KV %"]],
    ttft: [["ttft_p50", "p50"], ["ttft_p95", "p95"]],
    itl: [["itl_p50", "p50"], ["itl_p95", "p95"]],
    // A caller's own 4xx (bad request, wrong key, its rate limit) apart from the server's 5xx failures.
    events: [["preemptions", "preemptions"], ["aborts", "aborts"], ["server_errors", "server errors (5xx)"], ["client_errors", "client errors (4xx)"]],
    process: [["rss_mb", "RSS MiB"], ["cpu_percent", "CPU %"]],
  };
  const GPU_SERIES = [["gpu_mem_mb", "GPU MiB"], ["gpu_util", "GPU util %"]];
  const plots = {};
  // The shortest time span a chart shows, in seconds (the samples' t is Unix seconds, as uPlot expects).
  const MIN_SPAN_S = 60;

  // The figure's content width: the chart fills it and no more, so it shrinks with a phone's screen.
  function chartWidth(el) {
    const style = getComputedStyle(el);
    return Math.max(0, Math.floor(el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)));
  }

  // With one sample, uPlot widens the time axis to min + 86400 / ms, a day in its millisecond mode; but the
  // samples' t is Unix seconds (ms = 1e-3), so that is 1000 days, and the first load drew "Jun 2027 … Jun
  // 2029". The axis instead spans at least MIN_SPAN_S and ends at the newest sample (or now, before any).
  function timeRange(u, min, max) {
    const xs = u.data && u.data[0];
    if (!xs || !xs.length) {
      const now = Date.now() / 1000;
      return [now - MIN_SPAN_S, now];
    }
    const end = xs.length === 1 ? xs[0] : max;
    return [Math.min(min, end - MIN_SPAN_S), end];
  }

  function build(name, series) {
    const el = root.querySelector(`[data-chart="${name}"]`);
    const colours = palette();
    const axisColour = css().getPropertyValue("--muted").trim();
    const grid = { stroke: css().getPropertyValue("--border").trim(), width: 1 };
    const opts = {
      width: chartWidth(el),
      height: 180,
      series: [{}].concat(series.map(([, label], i) => ({ label, stroke: colours[i % colours.length], width: 2, spanGaps: true }))),
      axes: [{ stroke: axisColour, grid }, { stroke: axisColour, grid, size: 60 }],
      scales: { x: { time: true, range: timeRange } },
      legend: { live: false },
      // The time span drawn, for the browser tests: seconds, like the data.
      hooks: { setScale: [(u, key) => { if (key === "x") { el.dataset.xMin = String(u.scales.x.min); el.dataset.xMax = String(u.scales.x.max); } }] },
    };
    if (name === "process") {
      // MiB and percent on separate axes: the second series gets its own scale on the right.
      opts.series[2].scale = "pct";
      opts.axes.push({ scale: "pct", side: 1, stroke: axisColour, grid: { show: false }, size: 50 });
    }
    plots[name] = { plot: new uPlot(opts, [[]].concat(series.map(() => [])), el), series };
  }

  function columns(samples, series) {
    const xs = samples.map((s) => s.t);
    return [xs].concat(series.map(([key]) => samples.map((s) => (key === "kv_pct" ? s.kv_usage * 100 : s[key]))));
  }

  const FMT = { tokens_per_s: (v) => v.toFixed(1), kv_usage: (v) => (v * 100).toFixed(1) + "%", rss_mb: (v) => v.toFixed(0), cpu_percent: (v) => v.toFixed(0), ttft_p50: (v) => v.toFixed(3) + " s" };
  const shown = (sample, key) => (sample && sample[key] !== null && sample[key] !== undefined ? (FMT[key] ? FMT[key](sample[key]) : String(sample[key])) : "–");

  function stats(last) {
    for (const key of ["tokens_per_s", "running", "waiting", "kv_usage", "rss_mb", "cpu_percent"]) {
      const el = document.getElementById("stat-" + key);
      if (el && last[key] !== null && last[key] !== undefined) el.textContent = shown(last, key);
    }
  }

  // The replicas table, shown (with the tiles on the total) while two or more replicas report.
  const ROW_KEYS = ["tokens_per_s", "running", "waiting", "kv_usage", "ttft_p50", "rss_mb"];
  function tableRow(tr, head, headTag, sample, seen) {
    const first = document.createElement(headTag);
    if (headTag === "th") first.scope = "row";
    first.append(head);
    const cells = ROW_KEYS.map((key) => shown(sample, key)).concat([seen]).map((text) => {
      const td = document.createElement("td");
      td.textContent = text;
      return td;
    });
    tr.replaceChildren(first, ...cells);
  }

  function replicasTable(replicas, total) {
    const several = replicas.length > 1;
    document.getElementById("stat-scope").hidden = !several;
    document.getElementById("replicas").hidden = !several;
    document.getElementById("replica-count").textContent = String(replicas.length);
    root.dataset.replicas = String(replicas.length);
    if (!several) return;
    document.getElementById("replica-rows").replaceChildren(...replicas.map((replica) => {
      const tr = document.createElement("tr");
      tr.dataset.replica = replica.name;
      const head = document.createElement("span");
      head.append(replica.name);
      if (replica.this) {
        const mark = document.createElement("span");
        mark.className = "muted";
        mark.textContent = " (this one)";
        head.append(mark);
      }
      tableRow(tr, head, "td", replica.sample, replica.age_s < 1 ? "now" : replica.age_s.toFixed(0) + " s ago");
      return tr;
    }));
    tableRow(document.getElementById("replica-total"), "All replicas", "th", total, "");
  }

  async function tick() {
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (response.ok) {
        const { samples, total, replicas = [] } = await response.json();
        replicasTable(replicas, total);
        if (samples.length) {
          const last = samples[samples.length - 1];
          if (last.gpu_mem_mb !== null && !plots.gpu_swapped) {
            plots.process.plot.destroy();
            document.getElementById("process-caption").textContent = "GPU memory (MiB) and utilisation (%)";
            delete plots.process;
            CHARTS.process = GPU_SERIES;
            build("process", GPU_SERIES);
            plots.gpu_swapped = true;
          }
          for (const [name, entry] of Object.entries(plots)) {
            if (entry.plot) entry.plot.setData(columns(samples, entry.series));
          }
          stats(replicas.length > 1 ? total : last);
          root.dataset.samples = String(samples.length);
          root.dataset.lastSampleT = String(last.t);
          root.dataset.lastTokensPerS = String(last.tokens_per_s);
          root.dataset.maxRunning = String(Math.max(...samples.map((s) => s.running)));
        }
      }
    } catch (err) {
      console.warn("dashboard poll failed", err);
    }
    setTimeout(tick, 1000);
  }

  window.addEventListener("DOMContentLoaded", () => {
    for (const [name, series] of Object.entries(CHARTS)) build(name, series);
    tick();
  });
  // The theme toggle flips data-theme on <html>: rebuild the charts so their colours follow.
  new MutationObserver(() => {
    for (const [name, entry] of Object.entries(plots)) {
      if (!entry.plot) continue;
      const data = entry.plot.data;
      entry.plot.destroy();
      build(name, entry.series);
      plots[name].plot.setData(data);
    }
  }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });

  window.addEventListener("resize", () => {
    for (const [name, entry] of Object.entries(plots)) {
      if (!entry.plot) continue;
      const el = root.querySelector(`[data-chart="${name}"]`);
      entry.plot.setSize({ width: chartWidth(el), height: 180 });
    }
  });
})();
