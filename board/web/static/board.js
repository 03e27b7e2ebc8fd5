// GUA Board: a little plain JavaScript on top of server-rendered pages.
// - [data-live]: fetch the page's JSON every few seconds and swap in the server-rendered
//   fragments it carries (one renderer: the Jinja templates), without reloading.
// - [data-live-filters]: filter changes apply at once and stay in the address bar.
// - [data-live-chart]: a small live utilization chart fed by the same JSON.
// - [data-fleet-live]: the fleet's live heat-map (fleet_live.js), fed by its own stream.
// - [data-autosubmit], form[data-confirm]: small conveniences; everything works without JS.
// - .table-scroll: a table wider than its box says so: its cut edge fades (data-more).
// - select[data-kind-select]: shows only the form's fields (data-for-kinds) the chosen
//   kind uses; without JS every field shows, each saying which kinds use it.
"use strict";

(function () {
  document.documentElement.classList.add("js");

  function onReady(fn) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  }

  function focusKey(el) {
    if (!el || el === document.body) return null;
    if (el.id) return "#" + CSS.escape(el.id);
    if (el.getAttribute("href")) return 'a[href="' + CSS.escape(el.getAttribute("href")) + '"]';
    return null;
  }

  // data-more on a table's scroll box: which of its edges hides columns ("right", "left",
  // "both"), so the CSS fades that edge; absent when the whole table shows.
  function markScroller(box) {
    const hidden = box.scrollWidth - box.clientWidth;
    const left = box.scrollLeft > 1;
    const right = hidden - box.scrollLeft > 1;
    const more = left && right ? "both" : left ? "left" : right ? "right" : "";
    if (more) box.dataset.more = more;
    else delete box.dataset.more;
  }

  function markScrollers(root) {
    root.querySelectorAll(".table-scroll").forEach(markScroller);
  }

  function swapFragments(root, fragments) {
    const active = document.activeElement;
    Object.keys(fragments).forEach(function (key) {
      const target = root.querySelector('[data-fragment="' + key + '"]');
      if (!target || target.dataset.html === fragments[key]) return;
      const hadFocus = target.contains(active) ? focusKey(active) : null;
      target.innerHTML = fragments[key];
      target.dataset.html = fragments[key];
      if (hadFocus) {
        const again = target.querySelector(hadFocus);
        if (again) again.focus();
      }
    });
  }

  function startLive(root) {
    const base = root.dataset.live;
    const every = Math.max(1, Number(root.dataset.interval || 5)) * 1000;
    let timer = null;
    let busy = false;
    let etag = null; // an unchanged fleet answers 304 with no body
    let etagFor = null;

    async function refresh() {
      if (busy) return;
      busy = true;
      try {
        const url = base + window.location.search;
        const headers = { Accept: "application/json" };
        if (etag && etagFor === url) headers["If-None-Match"] = etag;
        const response = await fetch(url, {
          headers: headers,
          credentials: "same-origin",
          cache: "no-store",
        });
        if (response.status === 401) {
          window.location.reload(); // the session ended: the page sends us to sign in
          return;
        }
        if (response.status === 304) return;
        if (!response.ok) return;
        etag = response.headers.get("ETag");
        etagFor = url;
        const data = await response.json();
        swapFragments(root, data.fragments || {});
        markScrollers(root);
        root.dispatchEvent(new CustomEvent("board:update", { detail: data }));
        root.dataset.updatedAt = data.generatedAt || "";
      } catch (err) {
        // Offline for a moment: the next tick tries again.
      } finally {
        busy = false;
      }
    }

    // The live heat-map (fleet_live.js) is fed by the fleet's stream: while it shows, no
    // polling (a filter change still refreshes at once, through boardRefresh).
    function polling() {
      return !document.hidden && !root.querySelector("[data-fleet-live]");
    }

    function schedule() {
      clearInterval(timer);
      timer = setInterval(function () {
        if (polling()) refresh();
      }, every);
    }

    root.boardRefresh = refresh;
    document.addEventListener("visibilitychange", function () {
      if (polling()) refresh();
    });
    schedule();
  }

  function startFilters(form) {
    form.addEventListener("change", function () {
      const params = new URLSearchParams(new FormData(form));
      Array.from(params.keys()).forEach(function (k) {
        if (!params.get(k)) params.delete(k);
      });
      // Choices left at their default stay out of the address (a shorter link to share).
      form.querySelectorAll("[data-default]").forEach(function (field) {
        if (params.get(field.name) === field.dataset.default) params.delete(field.name);
      });
      const query = params.toString();
      history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
      const live = document.querySelector("[data-live]");
      if (live && live.boardRefresh) live.boardRefresh();
    });
    let typing = null;
    form.querySelectorAll('input[type="search"]').forEach(function (input) {
      input.addEventListener("input", function () {
        clearTimeout(typing);
        typing = setTimeout(function () { form.dispatchEvent(new Event("change")); }, 300);
      });
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      form.dispatchEvent(new Event("change"));
    });
  }

  const SVG = "http://www.w3.org/2000/svg";
  const KEEP = 120;

  function startLiveChart(section) {
    const root = section.closest("[data-live]");
    const target = section.querySelector("[data-live-target]");
    if (!root || !target) return;
    // Lines are keyed by GPU UUID, whichever source a point comes from. (Keyed by a
    // label, the stream's kept history, which arrives before the first snapshot names
    // the GPUs, used to draw each GPU twice: once by UUID, once as "GPU n".)
    const known = new Map(); // uuid -> {label, css}, from the page, as the history charts
    try {
      JSON.parse(section.dataset.gpus || "[]").forEach(function (gpu) {
        known.set(gpu.uuid, { label: gpu.label, css: gpu.css });
      });
    } catch (err) {
      // No names: lines are labelled by UUID.
    }
    const series = new Map(); // uuid -> [{t, util}]

    function nameOf(uuid) {
      const found = known.get(uuid);
      if (found) return found;
      const extra = { label: uuid, css: "series-" + (known.size % 16) };
      known.set(uuid, extra);
      return extra;
    }

    function draw() {
      const width = 600, height = 120, pad = 4;
      const svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", "0 0 " + width + " " + height);
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", "Live utilization per GPU, 0 to 100 percent");
      let all = [];
      series.forEach(function (points) { all = all.concat(points); });
      if (all.length === 0) return;
      const t0 = Math.min.apply(null, all.map(function (p) { return p.t; }));
      const t1 = Math.max.apply(null, all.map(function (p) { return p.t; }));
      const span = Math.max(1, t1 - t0);
      const legend = document.createElement("ul");
      legend.className = "chart-legend";
      // In the page's GPU order (by index), then any GPU the page did not know.
      const order = Array.from(known.keys()).filter(function (u) { return series.has(u); });
      order.forEach(function (uuid) {
        const points = series.get(uuid);
        const name = nameOf(uuid);
        const line = document.createElementNS(SVG, "polyline");
        line.setAttribute("class", "line " + name.css);
        line.setAttribute("data-series", uuid);
        line.setAttribute("fill", "none");
        line.setAttribute("stroke-width", "2");
        line.setAttribute("vector-effect", "non-scaling-stroke");
        line.setAttribute("points", points.map(function (p) {
          const x = pad + (width - 2 * pad) * (p.t - t0) / span;
          const y = height - pad - (height - 2 * pad) * p.util / 100;
          return x.toFixed(1) + "," + y.toFixed(1);
        }).join(" "));
        svg.appendChild(line);
        const item = document.createElement("li");
        const swatch = document.createElement("span");
        swatch.className = "swatch " + name.css;
        item.appendChild(swatch);
        const last = points[points.length - 1];
        item.appendChild(document.createTextNode(name.label + ": " + last.util + " %"));
        legend.appendChild(item);
      });
      target.replaceChildren(svg, legend);
    }

    let streaming = false;

    function add(uuid, t, util) {
      nameOf(uuid);
      const points = series.get(uuid) || [];
      if (points.length && points[points.length - 1].t >= t) return; // a repeat
      points.push({ t: t, util: util });
      while (points.length > KEEP) points.shift();
      series.set(uuid, points);
    }

    root.addEventListener("board:update", function (event) {
      const data = event.detail || {};
      const t = Date.parse(data.generatedAt || "") || Date.now();
      (data.gpus || []).forEach(function (gpu) {
        if (!known.has(gpu.uuid)) known.set(gpu.uuid, { label: "GPU " + gpu.index, css: "series-" + (known.size % 16) });
        // Once the agent's 1-second stream arrives, the snapshots only name the GPUs.
        if (streaming || gpu.state === "not_observed" || gpu.utilPct === null) return;
        add(gpu.uuid, t, gpu.utilPct);
      });
      if (!streaming) draw();
    });

    // Agents 1.6+ (and ours) stream utilization every second; the board relays it as SSE.
    if (section.dataset.stream && window.EventSource) {
      const source = new EventSource(section.dataset.stream);
      source.addEventListener("util", function (event) {
        const sample = JSON.parse(event.data);
        if (!streaming) {
          streaming = true;
          series.clear();
          const note = section.querySelector("[data-live-note]");
          if (note) note.textContent = "(streamed by the agent, every second)";
        }
        (sample.gpus || []).forEach(function (gpu) {
          add(gpu.uuid, sample.ts * 1000, gpu.utilPct);
        });
        draw();
      });
      window.addEventListener("pagehide", function () { source.close(); });
    }
  }

  // table[data-sortable]: each column header becomes a button that sorts the rows by
  // that column (a cell's data-value as a number when it has one, else its text);
  // pressed again it reverses. aria-sort says the order to assistive technology.
  function startSortable(table) {
    const heads = Array.from(table.querySelectorAll("thead th"));
    const body = table.tBodies[0];
    if (!body) return;

    function cellValue(row, column) {
      const cell = row.children[column];
      if (!cell) return "";
      if (cell.dataset.value !== undefined) {
        const n = Number(cell.dataset.value);
        return isNaN(n) ? -Infinity : n;
      }
      return cell.textContent.trim().toLowerCase();
    }

    function sortBy(column, order) {
      const rows = Array.from(body.rows);
      const sign = order === "ascending" ? 1 : -1;
      rows.sort(function (a, b) {
        const x = cellValue(a, column), y = cellValue(b, column);
        if (x < y) return -sign;
        if (x > y) return sign;
        return 0;
      });
      rows.forEach(function (row) { body.appendChild(row); });
      heads.forEach(function (th, i) {
        th.setAttribute("aria-sort", i === column ? order : "none");
      });
    }

    heads.forEach(function (th, column) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (th.firstChild) button.appendChild(th.firstChild);
      th.appendChild(button);
      button.addEventListener("click", function () {
        const now = th.getAttribute("aria-sort");
        const numeric = body.rows.length && body.rows[0].children[column] &&
          body.rows[0].children[column].dataset.value !== undefined;
        let order = numeric ? "descending" : "ascending";
        if (now === "descending") order = "ascending";
        else if (now === "ascending") order = "descending";
        sortBy(column, order);
      });
    });
  }

  // "3 h 10 min" since a stateSince, whole minutes rounded down (as board/web/fleet.py).
  function duration(ms) {
    const minutes = Math.max(0, Math.floor(ms / 60000));
    if (minutes < 1) return "under 1 min";
    const days = Math.floor(minutes / 1440);
    const hours = Math.floor((minutes % 1440) / 60);
    if (days) return days + " d " + hours + " h";
    if (hours) return hours + " h " + (minutes % 60) + " min";
    return minutes + " min";
  }

  function tickDurations() {
    const now = Date.now();
    document.querySelectorAll("[data-since]").forEach(function (el) {
      const since = Date.parse(el.dataset.since);
      if (isNaN(since)) return;
      const text = duration(now - since);
      if (el.textContent !== text) el.textContent = text;
    });
  }

  function startKindFields(select) {
    const fields = select.form.querySelectorAll("[data-for-kinds]");
    function show() {
      fields.forEach(function (field) {
        field.hidden = field.dataset.forKinds.split(" ").indexOf(select.value) < 0;
      });
    }
    select.addEventListener("change", show);
    show();
  }

  onReady(function () {
    setInterval(tickDurations, 15000);
    document.querySelectorAll("[data-live]").forEach(function (root) {
      root.querySelectorAll("[data-fragment]").forEach(function (el) {
        el.dataset.html = el.innerHTML;
      });
      startLive(root);
      if (root.boardRefresh) root.boardRefresh();
    });
    document.querySelectorAll("form[data-live-filters]").forEach(startFilters);
    document.querySelectorAll("[data-live-chart]").forEach(startLiveChart);
    document.querySelectorAll("table[data-sortable]").forEach(startSortable);
    document.querySelectorAll("select[data-kind-select]").forEach(startKindFields);
    markScrollers(document);
    window.addEventListener("resize", function () { markScrollers(document); });
    document.addEventListener("scroll", function (event) {
      const box = event.target;
      if (box instanceof Element && box.classList.contains("table-scroll")) markScroller(box);
    }, true);
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () { select.form.submit(); });
    });
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      let typing = null;
    form.querySelectorAll('input[type="search"]').forEach(function (input) {
      input.addEventListener("input", function () {
        clearTimeout(typing);
        typing = setTimeout(function () { form.dispatchEvent(new Event("change")); }, 300);
      });
    });
    form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  });
})();
