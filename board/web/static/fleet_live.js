// GUA Board: the fleet page's live heat-map ([data-fleet-live]). One cell per GPU, coloured
// by its utilization, fed by the fleet's frames (GET /w/{slug}/fleet/stream, documented in
// docs/architecture.md, "Live stream"): a keyframe (the host table and each host's newest
// sample), then, twice a second, what changed. Host names and GPU numbers come from the
// page (data-hosts); a host the page does not list is added by its id unless the page is
// filtered (data-complete="false"). Every name is set as text, never as HTML.
// The map is one Tab stop (an ARIA grid with a roving tabindex): arrow keys move between
// GPUs and hosts, Home/End to a row's ends, PageUp/PageDown by ten hosts.
"use strict";

(function () {
  const QUIET_MS = 10000; // no new sample for this long: the host's cells turn grey

  function onReady(fn) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  }

  function band(util) {
    if (util < 20) return "u0";
    if (util < 40) return "u1";
    if (util < 60) return "u2";
    if (util < 80) return "u3";
    return "u4";
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }

  // What the frames said, kept while the map itself is redrawn (a filter change does).
  const table = new Map(); // index -> hostId
  const samples = new Map(); // hostId -> {uuids, utils, mems, ts, seen}
  let source = null;
  let map = null;
  let lastFrameAt = 0;

  // -- frames --------------------------------------------------------------------------
  // Returns the hosts whose sample changed, or null after a keyframe (all of them).
  function applyFrame(frame, arrived) {
    if (frame.key) {
      table.clear();
      samples.clear();
    }
    (frame.hosts || []).forEach(function (entry) {
      const hostId = String(entry[1]);
      table.set(entry[0], hostId);
      const known = samples.get(hostId);
      if (known) known.uuids = entry[2];
      else samples.set(hostId, { uuids: entry[2], utils: [], mems: [], ts: 0, seen: 0 });
    });
    const changed = [];
    (frame.rows || []).forEach(function (row) {
      const hostId = table.get(row[0]);
      const sample = hostId === undefined ? null : samples.get(hostId);
      if (!sample) return;
      sample.utils = row[2];
      sample.mems = row[3];
      sample.ts = (frame.t * 1000) - row[1];
      // A delta's row is a sample that just arrived; a keyframe's may be an old one
      // (its age by the agent's clock, which is all the frame says).
      sample.seen = frame.key ? arrived - Math.max(0, row[1]) : arrived;
      changed.push(hostId);
    });
    lastFrameAt = arrived;
    return frame.key ? null : changed;
  }

  // -- the map -------------------------------------------------------------------------
  function describe(row, cell) {
    let text = row.name + ", " + cell.label + ": ";
    if (cell.util === null) text += "no live sample";
    else {
      text += cell.util + " % utilization, " + cell.mem + " MB memory used";
      if (cell.quiet) text += ", no new sample for 10 s";
    }
    cell.el.setAttribute("aria-label", text);
    cell.el.title = text;
  }

  function addCell(row, uuid, label) {
    const el = document.createElement("span");
    el.className = "lcell quiet";
    el.setAttribute("role", "gridcell");
    el.tabIndex = -1;
    el.textContent = "–";
    el.dataset.gpu = row.hostId + "/" + uuid;
    const cell = { el: el, label: label, util: null, mem: null, quiet: true };
    describe(row, cell);
    row.cells.set(uuid, cell);
    row.items.push(el);
    row.wrap.appendChild(el);
    return cell;
  }

  function addRow(m, hostId, name, uuids, indexes, listed) {
    const el = document.createElement("div");
    el.className = "live-row";
    el.setAttribute("role", "row");
    el.dataset.host = hostId;
    const head = document.createElement("span");
    head.className = "live-host";
    head.setAttribute("role", "rowheader");
    const link = document.createElement("a");
    link.href = m.base + encodeURIComponent(hostId);
    link.textContent = name;
    link.title = name;
    link.tabIndex = -1;
    head.appendChild(link);
    const wrap = document.createElement("span");
    wrap.className = "live-cells";
    wrap.setAttribute("role", "none");
    el.appendChild(head);
    el.appendChild(wrap);
    const row = {
      hostId: hostId, name: name, el: el, wrap: wrap, items: [link], cells: new Map(),
      listed: listed,
    };
    uuids.forEach(function (uuid, i) { addCell(row, uuid, "GPU " + indexes[i]); });
    m.rows.push(row);
    m.byHost.set(hostId, row);
    return row;
  }

  function paintHost(m, hostId, now) {
    const sample = samples.get(hostId);
    let row = m.byHost.get(hostId);
    if (!row) {
      if (!m.complete || !sample) return;
      row = addRow(m, hostId, "host " + hostId.slice(0, 8), [], [], false);
      m.grid.appendChild(row.el);
    }
    const quiet = !sample || now - sample.seen > QUIET_MS;
    if (!sample) {
      row.cells.forEach(function (cell) { paintCell(row, cell, cell.util, cell.mem, true); });
      return;
    }
    sample.uuids.forEach(function (uuid, i) {
      let cell = row.cells.get(uuid);
      if (!cell) {
        // A GPU the page did not list: shown unless the page is filtered.
        if (!m.complete) return;
        cell = addCell(row, uuid, "GPU " + uuid);
      }
      const util = sample.utils[i];
      if (typeof util !== "number") return;
      paintCell(row, cell, util, sample.mems[i], quiet);
    });
  }

  function paintCell(row, cell, util, mem, quiet) {
    if (cell.util === util && cell.mem === mem && cell.quiet === quiet) return;
    if (cell.util !== util) cell.el.textContent = util === null ? "–" : String(util);
    const name = "lcell " + (quiet || util === null ? "quiet" : band(util));
    if (cell.el.className !== name) cell.el.className = name;
    cell.util = util;
    cell.mem = mem;
    cell.quiet = quiet;
    describe(row, cell);
  }

  function paintAll(m, now) {
    m.rows.forEach(function (row) { paintHost(m, row.hostId, now); });
    if (m.complete) samples.forEach(function (_, hostId) { paintHost(m, hostId, now); });
  }

  function summarize(m) {
    let hosts = 0, gpus = 0, sum = 0, hot = 0, cold = 0;
    m.rows.forEach(function (row) {
      let live = false;
      row.cells.forEach(function (cell) {
        if (cell.util === null || cell.quiet) return;
        live = true;
        gpus += 1;
        sum += cell.util;
        if (cell.util >= 80) hot += 1;
        if (cell.util < 20) cold += 1;
      });
      if (live) hosts += 1;
    });
    let text;
    if (!gpus) text = "No live samples yet: agents 1.6 and later stream every second.";
    else {
      text = hosts + " of " + m.rows.length + " hosts streaming, " + gpus + " GPUs: mean " +
        Math.round(sum / gpus) + " % utilization, " + hot + " at 80 % or more, " + cold +
        " under 20 %. Updated " + clock(lastFrameAt) + ".";
    }
    if (m.summary && m.summary.textContent !== text) m.summary.textContent = text;
  }

  // -- the keyboard: one Tab stop, arrows inside ----------------------------------------
  function activate(m, el, focus) {
    if (m.active && m.active !== el) m.active.tabIndex = -1;
    el.tabIndex = 0;
    m.active = el;
    const row = m.byHost.get(el.closest("[role=row]").dataset.host);
    m.activeAt = { hostId: row.hostId, column: row.items.indexOf(el) };
    if (focus) el.focus();
  }

  function onKey(m, event) {
    const rowEl = event.target.closest("[role=row]");
    const row = rowEl && m.byHost.get(rowEl.dataset.host);
    if (!row) return;
    let r = m.rows.indexOf(row);
    let c = row.items.indexOf(event.target);
    if (c < 0) return;
    switch (event.key) {
      case "ArrowRight": c += 1; break;
      case "ArrowLeft": c -= 1; break;
      case "ArrowDown": r += 1; break;
      case "ArrowUp": r -= 1; break;
      case "PageDown": r += 10; break;
      case "PageUp": r -= 10; break;
      case "Home": c = 0; if (event.ctrlKey) r = 0; break;
      case "End": c = Infinity; if (event.ctrlKey) r = m.rows.length - 1; break;
      default: return;
    }
    event.preventDefault();
    r = Math.max(0, Math.min(m.rows.length - 1, r));
    const items = m.rows[r].items;
    c = Math.max(0, Math.min(items.length - 1, c));
    activate(m, items[c], true);
  }

  function mount(section, before) {
    const grid = section.querySelector("[data-live-grid]");
    const m = {
      section: section, grid: grid, summary: section.querySelector("[data-live-summary]"),
      base: section.dataset.hostBase || "", complete: section.dataset.complete === "true",
      rows: [], byHost: new Map(), active: null, activeAt: null,
    };
    let listed = [];
    try {
      listed = JSON.parse(section.dataset.hosts || "[]");
    } catch (err) {
      listed = []; // no names: hosts are added by id as they stream
    }
    listed.forEach(function (h) { addRow(m, String(h[0]), String(h[1]), h[2], h[3], true); });
    const fragment = document.createDocumentFragment();
    m.rows.forEach(function (row) { fragment.appendChild(row.el); });
    grid.replaceChildren(fragment);
    paintAll(m, Date.now());
    summarize(m);
    // The cell that had the Tab stop keeps it when the map is drawn again.
    let start = null;
    if (before && before.activeAt) {
      const row = m.byHost.get(before.activeAt.hostId);
      if (row) start = row.items[Math.min(before.activeAt.column, row.items.length - 1)];
    }
    if (!start && m.rows.length) start = m.rows[0].items[0];
    if (start) activate(m, start, false);
    grid.addEventListener("keydown", function (event) { onKey(m, event); });
    grid.addEventListener("focusin", function (event) {
      if (event.target !== m.active && event.target.closest("[role=row]")) {
        activate(m, event.target, false);
      }
    });
    return m;
  }

  // -- the stream ----------------------------------------------------------------------
  function connect(url) {
    source = new EventSource(url);
    source.addEventListener("frame", function (event) {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      const now = Date.now();
      const changed = applyFrame(frame, now);
      if (!map) return;
      if (changed === null) paintAll(map, now);
      else changed.forEach(function (hostId) { paintHost(map, hostId, now); });
      summarize(map);
    });
    source.addEventListener("error", function () {
      // EventSource reconnects by itself (and gets a keyframe); a refusal (signed out,
      // removed) closes it for good.
      if (source && source.readyState === EventSource.CLOSED && map && map.summary) {
        map.summary.textContent = "The live stream stopped. Reload the page to start it again.";
      }
    });
  }

  function sync() {
    const section = document.querySelector("[data-fleet-live]");
    if (!section) {
      if (source) source.close();
      source = null;
      map = null;
      return;
    }
    if (map && map.section === section) return;
    map = mount(section, map);
    const url = new URL(section.dataset.fleetLive, window.location.href).href;
    if (!source || source.url !== url) {
      if (source) source.close();
      connect(url);
    }
  }

  // Hosts that fell quiet turn grey even when no frame comes.
  function sweep() {
    if (!map) return;
    const now = Date.now();
    samples.forEach(function (sample, hostId) {
      const row = map.byHost.get(hostId);
      if (!row) return;
      const quiet = now - sample.seen > QUIET_MS;
      const first = row.cells.values().next().value;
      if (first && first.quiet !== quiet && first.util !== null) paintHost(map, hostId, now);
    });
    summarize(map);
  }

  onReady(function () {
    if (!window.EventSource) return;
    sync();
    document.querySelectorAll("[data-live]").forEach(function (root) {
      root.addEventListener("board:update", sync);
    });
    setInterval(sweep, 1000);
    window.addEventListener("pagehide", function () {
      if (source) source.close();
      source = null;
    });
  });
})();
