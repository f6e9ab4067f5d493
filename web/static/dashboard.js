// vmpooler dashboard: polls /api/v3/status every second, the activity and the recorded history
// less often, and draws them (SVG, no library). No framework.
// Every value from the API is put on the page with textContent, never as markup.
(function () {
  "use strict";

  var INTERVAL_MS = 1000;
  var TIMEOUT_MS = 4500;
  var ACTIVITY_EVERY = 5;   // polls
  var HISTORY_EVERY = 15;   // polls (every poll while fewer than two points exist)
  var STALE_MS = 3 * INTERVAL_MS;

  var root = (document.querySelector('meta[name="vmpooler-root"]') || {}).content || "";
  var statusUrl = root + "/api/v3/status?view=pools,queue,capacity,providers,users";
  var historyUrl = root + "/dashboard/stats/history?minutes=60";
  var activityUrl = root + "/dashboard/stats/activity";
  var SVG = "http://www.w3.org/2000/svg";
  var body = document.body;
  var taskLimit = parseInt(body.getAttribute("data-task-limit"), 10) || 0;
  var ondemandLimit = parseInt(body.getAttribute("data-ondemand-clone-limit"), 10) || 0;
  var siteName = document.getElementById("site-name").textContent;

  var state = {
    data: null,          // last good /status answer
    updatedAt: null,     // Date of the last good answer
    error: null,         // text of the last failure, null when the last poll worked
    timer: null,
    inFlight: false,
    polls: 0,
    history: null,       // last /dashboard/stats/history answer
    activity: null       // last /dashboard/stats/activity answer
  };

  function $(id) { return document.getElementById(id); }

  function setText(id, value) { $(id).textContent = value; }

  function fmt(n) { return typeof n === "number" ? n.toLocaleString() : "–"; }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function bar(fraction, tone) {
    var outer = el("div", "bar");
    var fill = el("div", "fill" + (tone ? " " + tone : ""));
    fill.style.width = Math.max(0, Math.min(1, fraction)) * 100 + "%";
    outer.appendChild(fill);
    return outer;
  }

  function setBar(id, fraction, tone) {
    var fill = $(id);
    fill.style.width = Math.max(0, Math.min(1, fraction)) * 100 + "%";
    fill.className = "fill" + (tone ? " " + tone : "");
  }

  // "2024-05-01 13:02:11 +0000" (vmpooler's Time#to_s) or ISO 8601 -> Date, or null.
  function parseTime(text) {
    if (!text) { return null; }
    var m = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}) ([+-]\d{2})(\d{2})$/.exec(text);
    var d = new Date(m ? m[1] + "T" + m[2] + m[3] + ":" + m[4] : text);
    return isNaN(d.getTime()) ? null : d;
  }

  function ago(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) { return s + " s ago"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return m + " min ago"; }
    var h = Math.floor(m / 60);
    if (h < 48) { return h + " h " + (m % 60) + " min ago"; }
    return Math.floor(h / 24) + " days ago";
  }

  function duration(seconds) {
    var s = Math.floor(seconds);
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) { return d + " d " + h + " h"; }
    if (h) { return h + " h " + m + " min"; }
    return m + " min";
  }

  function clock(date) { return date.toLocaleTimeString(); }

  // What a pool needs from the operator: a configuration error > empty > below size >
  // filling > full.
  function poolState(p) {
    if (p.config_error) {
      return { key: "config", label: "CONFIG ERROR", rank: 0, tone: "bad",
               title: p.config_error.error_class + ": " + p.config_error.message +
                      " (since " + p.config_error.since + ")" };
    }
    if (p.max <= 0) { return { key: "off", label: "size 0", rank: 3, tone: "idle" }; }
    if (p.ready <= 0) { return { key: "empty", label: "EMPTY", rank: 0, tone: "bad" }; }
    if (p.ready < p.max && p.pending <= 0) {
      return { key: "low", label: "below size", rank: 1, tone: "warn" };
    }
    if (p.ready < p.max) { return { key: "filling", label: "filling", rank: 2, tone: "warn" }; }
    return { key: "full", label: "full", rank: 4, tone: "" };
  }

  // A failover pool's note (pools with failover: true): down, recovering, or covering.
  function failoverNote(f) {
    if (!f) { return null; }
    var covering = Object.keys(f.covering || {});
    if (f.state === "down") {
      return { key: "down", text: "down (" + String(f.reason || "unknown").replace("_", " ") +
        "): siblings cover" };
    }
    if (f.state === "recovering") { return { key: "recovering", text: "recovering" }; }
    if (covering.length) {
      return { key: "covering", text: "size " + fmt(f.effective) + ": +" +
        covering.map(function (n) { return f.covering[n] + " for " + n; }).join(", ") };
    }
    return null;
  }

  // A pool's standby tier (pools with one): "+2 / 3 suspended" (no "/ target" for auto).
  function standbyNote(sb) {
    if (!sb || typeof sb.count !== "number") { return null; }
    var how = sb.state === "powered_off" ? "powered off" : "suspended";
    var auto = typeof sb.target !== "number";
    return {
      text: "+" + fmt(sb.count) + (auto ? "" : " / " + fmt(sb.target)) + " " + how,
      title: "standby tier: " + fmt(sb.count) + " VMs " + how + " (target " +
             (auto ? "chosen by the demand sizer" : fmt(sb.target)) + "), resumed when ready runs short"
    };
  }

  function poolRow(name, p, now) {
    var st = poolState(p);
    var tr = el("tr", st.key === "empty" || st.key === "config" ? "row-bad" : "");

    var nameCell = el("th", "");
    nameCell.scope = "row";
    nameCell.appendChild(el("span", "pool-name", name));
    if (p.alias !== undefined && p.alias !== null) {
      var aka = Array.isArray(p.alias) ? p.alias.join(", ") : String(p.alias);
      if (aka) { nameCell.appendChild(el("span", "alias", "aka " + aka)); }
    }
    tr.appendChild(nameCell);

    var readyCell = el("td", "col-ready");
    var wrap = el("div", "ready-cell");
    wrap.appendChild(bar(p.max > 0 ? p.ready / p.max : 0, st.tone));
    wrap.appendChild(el("span", "nums", fmt(p.ready) + " / " + fmt(p.max)));
    readyCell.appendChild(wrap);
    var sb = standbyNote(p.standby);
    if (sb) {
      var standby = el("span", "standby", sb.text);
      standby.title = sb.title;
      readyCell.appendChild(standby);
    }
    tr.appendChild(readyCell);

    tr.appendChild(el("td", "num", fmt(p.pending)));
    tr.appendChild(el("td", "num", fmt(p.running)));

    var stateCell = el("td", "");
    stateCell.appendChild(el("span", "state state-" + st.key, st.label));
    if (st.title) { stateCell.title = st.title; }
    var fo = failoverNote(p.failover);
    if (fo) { stateCell.appendChild(el("span", "failover failover-" + fo.key, fo.text)); }
    tr.appendChild(stateCell);

    var bootCell = el("td", "");
    var booted = parseTime(p.lastBoot);
    if (booted) {
      bootCell.textContent = ago(now - booted.getTime());
      bootCell.title = p.lastBoot;
    } else {
      bootCell.textContent = p.lastBoot ? p.lastBoot : "never";
      bootCell.className = "muted";
    }
    tr.appendChild(bootCell);

    var sparkCell = el("td", "col-spark");
    var h = state.history && state.history.pools && state.history.pools[name];
    if (h && h.ready.length > 1) {
      var svg = svgEl("svg", { viewBox: "0 0 100 20", preserveAspectRatio: "none",
                               "aria-hidden": "true" });
      svg.appendChild(svgEl("polyline", { points: linePoints(h.t, h.ready, 100, 20,
        Math.max(1, p.max, Math.max.apply(null, h.ready))) }));
      sparkCell.appendChild(svg);
      sparkCell.title = "ready " + Math.min.apply(null, h.ready) + " to " +
        Math.max.apply(null, h.ready) + " over the last hour";
    } else {
      sparkCell.appendChild(el("span", "muted", "–"));
    }
    tr.appendChild(sparkCell);
    return { row: tr, rank: st.rank };
  }

  function renderPools(pools) {
    var filter = $("filter").value.trim().toLowerCase();
    var problemsFirst = $("problems-first").checked;
    var now = Date.now();
    var rows = [];
    var names = Object.keys(pools);
    names.forEach(function (name, index) {
      var p = pools[name];
      var aka = p.alias === undefined || p.alias === null ? "" : String(p.alias);
      if (filter && name.toLowerCase().indexOf(filter) < 0 &&
          aka.toLowerCase().indexOf(filter) < 0) {
        return;
      }
      var built = poolRow(name, p, now);
      built.index = index;
      rows.push(built);
    });
    if (problemsFirst) {
      rows.sort(function (a, b) { return a.rank - b.rank || a.index - b.index; });
    }
    var tbody = $("pool-rows");
    if (rows.length === 0) {
      var tr = el("tr", "");
      var td = el("td", "placeholder",
        names.length ? "No pool matches the filter." : "No pools are configured.");
      td.colSpan = 7;
      tr.appendChild(td);
      tbody.replaceChildren(tr);
    } else {
      tbody.replaceChildren.apply(tbody, rows.map(function (r) { return r.row; }));
    }
    setText("pool-count", filter ? "(" + rows.length + " of " + names.length + ")"
                                 : "(" + names.length + ")");
  }

  function render() {
    var data = state.data;
    if (!data) { return; }
    var pools = data.pools || {};
    var queue = data.queue || {};
    var capacity = data.capacity || {};
    var status = data.status || {};
    var empty = status.empty || [];

    var sumReady = 0, sumSize = 0, sumPending = 0, sumRunning = 0;
    Object.keys(pools).forEach(function (name) {
      var p = pools[name];
      sumReady += p.ready; sumSize += p.max; sumPending += p.pending; sumRunning += p.running;
    });

    setText("t-ready", fmt(capacity.current));
    setText("t-size", fmt(capacity.total));
    var fraction = capacity.total > 0 ? capacity.current / capacity.total : 0;
    setBar("t-bar", fraction, fraction >= 1 ? "" : (empty.length ? "bad" : "warn"));
    setText("t-percent", typeof capacity.percent === "number" ? capacity.percent + " % full" : "");

    setText("t-empty", fmt(empty.length));
    setText("t-empty-note", "of " + fmt(Object.keys(pools).length) + " pools");
    $("card-empty").className = "card" + (empty.length ? " bad" : "");

    setText("t-pending", fmt(queue.pending));
    setText("t-cloning", fmt(queue.cloning));
    setText("t-booting", fmt(queue.booting));

    var limit = taskLimit + ondemandLimit;
    setText("t-slots", fmt(queue.cloning));
    setText("t-slot-limit", fmt(limit));
    var used = limit > 0 ? queue.cloning / limit : 0;
    setBar("t-slot-bar", used, used >= 1 ? "warn" : "");
    setText("t-slot-note", "limit " + fmt(taskLimit) + " for pools + " + fmt(ondemandLimit) +
      " on demand");
    $("card-slots").className = "card" + (used >= 1 ? " warn" : "");

    setText("t-requested", fmt(queue.requested));
    $("card-requested").className = "card" + (queue.requested > 0 ? " warn" : "");
    setText("t-running", fmt(queue.running));
    setText("t-completed", fmt(queue.completed));

    renderProviders(data.providers || {});
    renderBreakers(data.providers || {});
    renderUsers(data.users, data.users_summary);

    setText("f-ready", fmt(sumReady));
    setText("f-size", fmt(sumSize));
    setText("f-pending", fmt(sumPending));
    setText("f-running", fmt(sumRunning));

    renderPools(pools);

    setText("uptime", typeof status.uptime === "number"
      ? "API up " + duration(status.uptime) : "");
  }

  // Circuit breakers: "ok" while every provider's is closed, else the ones that are not.
  function renderProviders(providers) {
    var names = Object.keys(providers).sort();
    var troubled = names.filter(function (name) {
      var b = providers[name].circuit_breaker;
      return b !== "closed" && b !== "disabled";
    });
    var open = troubled.some(function (name) {
      return providers[name].circuit_breaker === "open";
    });
    setText("t-providers", troubled.length ? troubled.length + " of " + names.length
                                           : (names.length ? "ok" : "–"));
    setText("t-providers-note", troubled.length
      ? troubled.map(function (name) {
          var p = providers[name];
          var note = name + ": breaker " + p.circuit_breaker.replace("_", "-");
          return p.last_error ? note + " (" + p.last_error + ")" : note;
        }).join("; ")
      : "circuit breakers closed");
    $("card-providers").className = "card" + (open ? " bad" : (troubled.length ? " warn" : ""));
  }

  function svgEl(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }

  // "x,y x,y ..." of values against times, scaled into width x height (y grows down).
  function linePoints(ts, values, width, height, top) {
    var t0 = ts[0], span = Math.max(1, ts[ts.length - 1] - t0);
    return values.map(function (v, i) {
      var x = (ts[i] - t0) / span * width;
      var y = height - Math.max(0, v) / top * (height - 4) - 2;
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" ");
  }

  // One chart: a polyline per series; its summary goes to aria-label and the note below.
  function drawChart(id, ts, series) {
    var svg = $(id);
    var note = $(id + "-note");
    if (ts.length < 2) {
      svg.replaceChildren();
      svg.setAttribute("aria-label", "No history recorded yet");
      note.textContent = ts.length ? "One point recorded so far; the chart starts at the next." :
        "No history recorded yet.";
      return;
    }
    var top = 1;
    series.forEach(function (s) { top = Math.max(top, Math.max.apply(null, s.values)); });
    var nodes = [];
    [0.25, 0.5, 0.75].forEach(function (f) {
      nodes.push(svgEl("line", { x1: 0, x2: 600, y1: 160 * f, y2: 160 * f, "class": "grid" }));
    });
    series.forEach(function (s) {
      var line = svgEl("polyline", { points: linePoints(ts, s.values, 600, 160, top),
                                     "class": "s-" + s.key });
      var title = svgEl("title", {});
      title.textContent = s.key;
      line.appendChild(title);
      nodes.push(line);
    });
    svg.replaceChildren.apply(svg, nodes);
    var from = new Date(ts[0] * 1000), to = new Date(ts[ts.length - 1] * 1000);
    var text = ts.length + " points from " + clock(from) + " to " + clock(to) + "; now " +
      series.map(function (s) {
        var last = s.values[s.values.length - 1];
        return s.key + " " + fmt(last) + " (max " + fmt(Math.max.apply(null, s.values)) + ")";
      }).join(", ") + "; scale 0 to " + fmt(top) + ".";
    svg.setAttribute("aria-label", text);
    note.textContent = text;
  }

  // Sum the chosen pools' series point by point (points share their interval start).
  function historySeries(pools, chosen) {
    var byT = {};
    Object.keys(pools).forEach(function (name) {
      if (chosen && name !== chosen) { return; }
      var h = pools[name];
      h.t.forEach(function (t, i) {
        var row = byT[t] || (byT[t] = { ready: 0, running: 0, pending: 0, checkouts: 0, clones: 0,
                                        target: null });
        row.ready += h.ready[i]; row.running += h.running[i]; row.pending += h.pending[i];
        row.checkouts += h.checkouts[i]; row.clones += h.clones[i];
        var target = h.target ? h.target[i] : null;  // demand-sized pools only
        if (target !== null && target !== undefined) { row.target = (row.target || 0) + target; }
      });
    });
    var ts = Object.keys(byT).map(Number).sort(function (a, b) { return a - b; });
    function col(key) { return ts.map(function (t) { return byT[t][key]; }); }
    return { t: ts, ready: col("ready"), running: col("running"), pending: col("pending"),
             checkouts: col("checkouts"), clones: col("clones"), target: col("target") };
  }

  function renderHistory() {
    var data = state.history;
    if (!data) { return; }
    var pools = data.pools || {};
    var pick = $("history-pool");
    var names = Object.keys(pools);
    if (pick.options.length !== names.length + 1) {
      var keep = pick.value;
      var opts = [el("option", "", "all pools")];
      opts[0].value = "";
      names.forEach(function (name) { var o = el("option", "", name); o.value = name; opts.push(o); });
      pick.replaceChildren.apply(pick, opts);
      pick.value = names.indexOf(keep) >= 0 ? keep : "";
    }
    var h = historySeries(pools, pick.value);
    setText("history-span", h.t.length ? "(last hour, " + h.t.length + " points)" : "");
    var vms = [{ key: "ready", values: h.ready },
      { key: "running", values: h.running }, { key: "pending", values: h.pending }];
    if (h.target.some(function (v) { return v !== null; })) {
      // demand sizing: the target it kept against what was ready (nulls drawn as 0)
      vms.push({ key: "target", values: h.target.map(function (v) { return v || 0; }) });
    }
    drawChart("chart-vms", h.t, vms);
    drawChart("chart-rates", h.t, [{ key: "checkouts", values: h.checkouts },
      { key: "clones", values: h.clones }]);
  }

  function historyPoints() {
    var pools = state.history && state.history.pools || {};
    var most = 0;
    Object.keys(pools).forEach(function (name) { most = Math.max(most, pools[name].t.length); });
    return most;
  }

  function placeholderRow(tbody, cols, text) {
    var tr = el("tr", "");
    var td = el("td", "placeholder", text);
    td.colSpan = cols;
    tr.appendChild(td);
    tbody.replaceChildren(tr);
  }

  // Each cell of a table's body labelled with its column's header (data-label), which the
  // narrow layout shows beside the value.
  function labelCells(tbody) {
    var head = tbody.parentNode.tHead;
    if (!head || !head.rows.length) { return; }
    var names = [].map.call(head.rows[0].cells, function (th) { return th.textContent; });
    [].forEach.call(tbody.rows, function (tr) {
      [].forEach.call(tr.cells, function (cell, i) {
        if (cell.colSpan === 1 && names[i]) { cell.setAttribute("data-label", names[i]); }
      });
    });
  }

  function renderActivity() {
    var data = state.activity;
    if (!data) { return; }
    var nowMs = Date.now();
    var requests = data.requests || [];
    setText("requests-count", "(" + requests.length + ")");
    var tbody = $("request-rows");
    if (!requests.length) {
      placeholderRow(tbody, 8, "None.");
    } else {
      tbody.replaceChildren.apply(tbody, requests.map(function (r) {
        var tr = el("tr", "");
        // Without a token (auth configured) the API names no request id nor user: the
        // pools asked for stand in for the id.
        var hidden = data.requesters === false;
        var name = el("td", hidden ? "pool-name muted" : "pool-name",
          hidden ? (r.requested || "–") : r.id);
        if (hidden) { name.title = "request ids and users need an API token"; }
        tr.appendChild(name);
        tr.appendChild(el("td", hidden ? "muted" : "", hidden ? "hidden" : (r.user || "–")));
        tr.appendChild(el("td", r.priority === "normal" ? "muted" : "", r.priority || "normal"));
        tr.appendChild(el("td", "", duration(Math.max(0, nowMs / 1000 - r.created))));
        // The clone queue's estimate (docs/fairness.md "Honest waits"): VMs granted before
        // this request's next one, and when its last VM should be ready.
        var placed = r.queue_position !== null && r.queue_position !== undefined;
        tr.appendChild(el("td", placed ? "num" : "num muted", placed ? fmt(r.queue_position) : "–"));
        var eta = r.estimated_ready_at;
        var cell = el("td", eta ? "" : "muted", eta ? (eta * 1000 <= nowMs ? "due" :
          "≈ " + duration(eta - nowMs / 1000)) : "–");
        if (eta) { cell.title = new Date(eta * 1000).toLocaleString(); }
        tr.appendChild(cell);
        var left = r.deadline - nowMs / 1000;
        var dl = el("td", left < 0 ? "late" : "",
          left < 0 ? "overdue by " + duration(-left) : "in " + duration(left));
        dl.title = new Date(r.deadline * 1000).toLocaleString();
        tr.appendChild(dl);
        tr.appendChild(el("td", "", r.status));
        return tr;
      }));
    }
    labelCells(tbody);
    var list = $("error-list");
    var errors = data.errors || [];
    if (!errors.length) {
      list.replaceChildren(el("li", "placeholder", "None."));
    } else {
      list.replaceChildren.apply(list, errors.map(function (e) {
        var li = el("li", "");
        li.appendChild(el("strong", "", e.queue + " "));
        li.appendChild(document.createTextNode((e.pool ? e.pool + "/" : "") + e.vm + ": " +
          (e.error_class ? e.error_class + ": " : "") + e.error_message + " — " +
          ago(nowMs - e.at * 1000)));
        return li;
      }));
    }
  }

  // Quota usage (/status "users", sent when :quotas: sets a limit): "held / limit".
  function ofLimit(n, limit) { return fmt(n) + (limit === null || limit === undefined ? "" : " / " + fmt(limit)); }

  // "users" lists at most 100 (those holding the most); "users_summary" counts them all.
  function renderUsers(users, summary) {
    var panel = $("users-panel");
    panel.hidden = !users;
    if (!users) { return; }
    var names = Object.keys(users).sort();
    var total = summary && summary.users > names.length ? summary.users : names.length;
    setText("users-count", "(" + (total > names.length ? names.length + " of " + total : total) + ")");
    var tbody = $("user-rows");
    if (!names.length) { placeholderRow(tbody, 3, "None."); return; }
    tbody.replaceChildren.apply(tbody, names.map(function (name) {
      var u = users[name];
      var limits = u.limits || {};
      var tr = el("tr", "");
      tr.appendChild(el("th", "pool-name", name));
      tr.firstChild.scope = "row";
      var full = limits.vms_held !== null && limits.vms_held !== undefined && u.vms_held >= limits.vms_held;
      tr.appendChild(el("td", full ? "num late" : "num", ofLimit(u.vms_held, limits.vms_held)));
      tr.appendChild(el("td", "num", ofLimit(u.ondemand_in_flight, limits.ondemand_in_flight)));
      return tr;
    }));
  }

  function renderBreakers(providers) {
    var tbody = $("provider-rows");
    var names = Object.keys(providers).sort();
    if (!names.length) { placeholderRow(tbody, 3, "No providers."); return; }
    tbody.replaceChildren.apply(tbody, names.map(function (name) {
      var p = providers[name];
      var b = String(p.circuit_breaker || "unknown");
      var tr = el("tr", "");
      tr.appendChild(el("th", "pool-name", name));
      tr.firstChild.scope = "row";
      var mark = b === "open" ? "✖ " : (b === "half_open" ? "◐ " : "✔ ");
      tr.appendChild(el("td", "breaker-" + b, mark + b.replace("_", "-")));
      tr.appendChild(el("td", p.last_error ? "" : "muted", p.last_error || "none"));
      return tr;
    }));
  }

  // A side fetch (history, activity): drawn when it arrives; a failure keeps the last one.
  function side(url, key, draw) {
    fetch(url, { cache: "no-store", headers: { "Accept": "application/json" } })
      .then(function (resp) { return resp.ok ? resp.json() : null; })
      .then(function (data) {
        if (data && typeof data === "object") { state[key] = data; draw(); }
      })
      .catch(function () { /* shown by the status poll's connection state */ });
  }

  function renderConnection() {
    var conn = $("conn");
    var main = $("main");
    var alert = $("alert");
    var now = Date.now();
    var stale = state.updatedAt && now - state.updatedAt.getTime() > STALE_MS;
    var since = state.updatedAt
      ? "last update " + clock(state.updatedAt) + " (" + ago(now - state.updatedAt.getTime()) + ")"
      : "no data yet";
    var empty = state.data && state.data.status && state.data.status.empty || [];

    if (state.error) {
      conn.className = "conn conn-error";
      setText("conn-text", "Cannot reach the API — " + since);
      alert.className = "alert";
      alert.textContent = "Cannot reach the API: " + state.error + ". " +
        (state.updatedAt ? "The numbers below are from " + clock(state.updatedAt) + "."
                         : "Nothing to show yet.") + " Retrying every " + INTERVAL_MS / 1000 + " s.";
      alert.hidden = false;
      main.className = state.data ? "stale" : "waiting";
    } else if (stale) {
      conn.className = "conn conn-stale";
      setText("conn-text", "Waiting for the API — " + since);
      main.className = "stale";
    } else if (state.updatedAt) {
      conn.className = "conn conn-ok";
      setText("conn-text", "Live — updated " + clock(state.updatedAt));
      main.className = "";
      if (empty.length) {
        alert.className = "alert";
        alert.textContent = (empty.length === 1 ? "1 pool is" : empty.length + " pools are") +
          " empty: " + empty.join(", ");
        alert.hidden = false;
      } else {
        alert.hidden = true;
      }
    }
    var prefix = state.error ? "⚠ " : (empty.length ? "(" + empty.length + " empty) " : "");
    document.title = prefix + siteName;
  }

  function describe(resp) {
    if (resp.status === 429) {
      var after = resp.headers.get("Retry-After");
      return "rate limited (HTTP 429" + (after ? ", retry after " + after + " s" : "") + ")";
    }
    return "HTTP " + resp.status + (resp.statusText ? " " + resp.statusText : "");
  }

  function schedule(delay) {
    if (state.timer !== null) { clearTimeout(state.timer); }
    state.timer = setTimeout(poll, delay);
  }

  function poll() {
    state.timer = null;
    if (document.hidden || state.inFlight) {
      schedule(INTERVAL_MS);
      return;
    }
    state.inFlight = true;
    if (state.polls % ACTIVITY_EVERY === 0) { side(activityUrl, "activity", renderActivity); }
    if (state.polls % HISTORY_EVERY === 0 || historyPoints() < 2) {
      side(historyUrl, "history", function () {
        renderHistory();
        if (state.data) { renderPools(state.data.pools || {}); }
      });
    }
    state.polls += 1;
    var delay = INTERVAL_MS;
    var controller = typeof AbortController === "function" ? new AbortController() : null;
    var killer = controller ? setTimeout(function () { controller.abort(); }, TIMEOUT_MS) : null;
    fetch(statusUrl, {
      cache: "no-store",
      headers: { "Accept": "application/json" },
      signal: controller ? controller.signal : undefined
    }).then(function (resp) {
      if (!resp.ok) {
        if (resp.status === 429) {
          var after = parseInt(resp.headers.get("Retry-After"), 10);
          if (after > 0) { delay = Math.max(delay, after * 1000); }
        }
        throw new Error(describe(resp));
      }
      return resp.json();
    }).then(function (data) {
      if (!data || typeof data !== "object" || !data.pools) {
        throw new Error("unexpected answer from /api/v3/status");
      }
      state.data = data;
      state.updatedAt = new Date();
      state.error = null;
      render();
    }).catch(function (err) {
      state.error = err && err.name === "AbortError"
        ? "no answer within " + TIMEOUT_MS / 1000 + " s"
        : (err && err.message && err.message !== "Failed to fetch" &&
           err.message.indexOf("NetworkError") < 0 ? err.message : "network error");
    }).then(function () {
      if (killer !== null) { clearTimeout(killer); }
      state.inFlight = false;
      renderConnection();
      schedule(delay);
    });
  }

  $("history-pool").addEventListener("change", renderHistory);
  $("filter").addEventListener("input", function () { if (state.data) { renderPools(state.data.pools || {}); } });
  $("problems-first").addEventListener("change", function () {
    try { localStorage.setItem("vmpooler.problemsFirst", this.checked ? "1" : ""); } catch (e) { /* private mode */ }
    if (state.data) { renderPools(state.data.pools || {}); }
  });
  try { $("problems-first").checked = localStorage.getItem("vmpooler.problemsFirst") === "1"; } catch (e) { /* ignore */ }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !state.inFlight) { schedule(0); }
  });
  // Keep "x s ago" and the stale warning honest between polls.
  setInterval(function () { if (state.updatedAt || state.error) { renderConnection(); } }, 1000);

  poll();
}());
