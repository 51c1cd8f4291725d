// Headwater's web console: each page renders the JSON its server put in #data, then keeps it fresh.
// Text from the server is only ever set as text (textContent, attributes), never parsed as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]').content;
const data = JSON.parse(document.getElementById("data").textContent);
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k === "on") for (const [event, fn] of Object.entries(v)) node.addEventListener(event, fn);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function show(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? value.toLocaleString("en") : value.toFixed(2);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 23) : "";
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 120) return Math.round(seconds) + " s";
  if (seconds < 7200) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return Math.round(seconds / 3600) + " h";
  return Math.round(seconds / 86400) + " d";
}

// A table from rows: columns [key, heading, render?]; render returns a string or a node.
function fill(table, rows, columns, options = {}) {
  table.replaceChildren(el("tr", {}, ...columns.map(([, heading]) => el("th", {text: heading}))));
  for (const row of rows) {
    const tr = el("tr", options.rowAttrs ? options.rowAttrs(row) : {});
    for (const [key, , render] of columns) {
      const value = render ? render(row[key], row) : show(row[key]);
      const td = el("td", {"data-column": key, class: typeof row[key] === "number" ? "num" : null});
      td.append(value instanceof Node ? value : document.createTextNode(value));
      tr.append(td);
    }
    table.append(tr);
  }
  if (!rows.length) table.append(el("tr", {}, el("td", {colspan: columns.length, class: "hint", text: options.empty || "none"})));
}

function notice(text) {
  const p = document.getElementById("notice");
  p.textContent = text;
  p.hidden = !text;
}

// The API's own call (POST /v1/<operation>), on the session cookie and the page's CSRF token.
async function call(operation, args) {
  const answer = await fetch("/v1/" + operation, {
    method: "POST", headers: {"content-type": "application/json", "x-csrf-token": csrf},
    body: JSON.stringify(args)});
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(answer.status + " " + (body.error || "") + ": " + (body.message || answer.statusText));
  return body.result;
}

async function fetchJson(url, init) {
  const answer = await fetch(url, init);
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(answer.status + " " + (body.error || "") + ": " + (body.message || answer.statusText));
  return body;
}

const ACTION_TEXT = {stop_graph: "stop", start_graph: "start", resubmit_graph: "resubmit", drop_graph: "drop",
                     purge_records: "purge records"};

function actionButtons(fqn, actions, done) {
  const span = el("span", {class: "actions"});
  for (const op of actions) {
    const verb = ACTION_TEXT[op] || op;
    span.append(el("button", {type: "button", class: "action" + (op === "drop_graph" ? " danger" : ""),
                              "data-action": op, "data-graph": fqn, text: verb, on: {click: async () => {
      if (!window.confirm(`${verb} graph ${fqn}?`)) return;
      try {
        await call(op, op === "drop_graph" ? {fqn, include_tables: false} : {fqn});
        notice("");
      } catch (error) { notice(`${verb} ${fqn}: ${error.message}`); }
      done();
    }}}));
  }
  return span;
}

document.getElementById("logout").addEventListener("click", async () => {
  await fetch("/ui/logout", {method: "POST", headers: {"x-csrf-token": csrf}});
  location.assign("/ui/login");
});

// -- graphs ------------------------------------------------------------------------------------------------------
function graphsPage(rows) {
  const table = document.getElementById("graphs");
  const draw = (rows) => fill(table, rows, [
    ["fqn", "graph", (v) => el("a", {href: "/ui/graph/" + encodeURIComponent(v), text: v})],
    ["status", "status", (v) => el("span", {class: "badge status-" + v, text: v})],
    ["owner", "owner"], ["age_s", "age", (v) => age(v)], ["rows_per_s", "rows/s"],
    ["pending_rows", "lag (rows)"], ["pending_versions", "lag (versions)"], ["reason", "reason"],
    ["actions", "", (v, row) => actionButtons(row.fqn, v, refresh)],
  ], {rowAttrs: (row) => ({"data-graph": row.fqn}), empty: "no graphs yet"});
  const refresh = async () => {
    try { draw(await fetchJson("/ui/api/graphs")); } catch (error) { notice(error.message); }
  };
  draw(rows);
  setInterval(refresh, 5000);
}

// -- one graph: its DAG laid out by dagre, numbers by server-sent events -------------------------------------
function graphPage(picture) {
  const svg = document.getElementById("dag");
  let view = picture.physical ? "physical" : "logical";
  let latest = null;
  const NODE_W = 210, NODE_H = 78;

  function layout() {
    const part = picture[view];
    const g = new dagre.graphlib.Graph({compound: true, multigraph: true});
    g.setGraph({rankdir: "LR", nodesep: 28, ranksep: 70, marginx: 16, marginy: 16});
    g.setDefaultEdgeLabel(() => ({}));
    if (view === "physical") {
      for (const sg of part.subgraphs) {
        g.setNode("sg" + sg.id, {label: `subgraph ${sg.id} · ${sg.tasks.length} task${sg.tasks.length > 1 ? "s" : ""}`,
                                 clusterLabelPos: "top"});
      }
    }
    for (const n of part.nodes) {
      g.setNode(n.id, {width: NODE_W, height: NODE_H, node: n});
      if (view === "physical" && n.subgraph !== null && n.kind !== "table") g.setParent(n.id, "sg" + n.subgraph);
    }
    part.edges.forEach((e, i) => g.setEdge(e.src, e.dst, {label: e.label, width: e.label ? 70 : 0, height: 14,
                                                            labelpos: "c"}, "e" + i));
    dagre.layout(g);
    return g;
  }

  function draw() {
    const g = layout();
    const size = g.graph();
    svg.replaceChildren();
    const width = Math.ceil(size.width + 20), height = Math.ceil(size.height + 30);
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);  // scaled down to the page's width, never up
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    for (const id of g.nodes()) {
      const box = g.node(id);
      if (box.node) continue;  // a cluster: drawn first, beneath
      svg.append(el("svg:g", {class: "cluster", "data-subgraph": id.slice(2)},
        el("svg:rect", {x: box.x - box.width / 2, y: box.y - box.height / 2 - 14, width: box.width, height: box.height + 14, rx: 6}),
        el("svg:text", {x: box.x - box.width / 2 + 8, y: box.y - box.height / 2 - 2, text: box.label})));
    }
    for (const e of g.edges()) {
      const edge = g.edge(e);
      const d = edge.points.map((p, i) => (i ? "L" : "M") + p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" ");
      const group = el("svg:g", {class: "edge", "data-src": e.v, "data-dst": e.w},
                       el("svg:path", {d, "marker-end": "url(#arrow)"}));
      if (edge.label) {
        const w = edge.label.length * 7 + 8;
        group.append(el("svg:rect", {x: edge.x - w / 2, y: edge.y - 8, width: w, height: 16, rx: 3, class: "label"}),
                     el("svg:text", {x: edge.x, y: edge.y + 4, "text-anchor": "middle", text: edge.label}));
      }
      svg.append(group);
    }
    svg.prepend(el("svg:defs", {}, el("svg:marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"}, el("svg:path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#5b6670"}))));
    for (const id of g.nodes()) {
      const box = g.node(id);
      if (!box.node) continue;
      const n = box.node, x = box.x - NODE_W / 2, y = box.y - NODE_H / 2;
      const kind = n.kind + (n.private ? " private" : "");
      svg.append(el("svg:g", {class: "node " + kind, "data-node": n.id, "data-name": n.name, "data-kind": n.kind},
        el("svg:rect", {x, y, width: NODE_W, height: NODE_H, rx: n.kind === "table" ? 2 : 10}),
        el("svg:text", {x: x + 8, y: y + 16, class: "title", text: `${n.name}`}),
        el("svg:text", {x: x + 8, y: y + 30, class: "kind", text: `${n.type}${n.private ? " (private)" : ""}`}),
        el("svg:text", {x: x + 8, y: y + 46, class: "numbers line1"}),
        el("svg:text", {x: x + 8, y: y + 60, class: "numbers line2"}),
        el("svg:text", {x: x + 8, y: y + 73, class: "error"})));
    }
    if (latest) numbers(latest);
  }

  // The live numbers on each node: an engine's subgraph (rows in/out, rows/s, lag) and its own state.
  function numbers(now) {
    latest = now;
    const status = document.getElementById("status");
    status.textContent = now.status;
    status.className = "badge status-" + now.status;
    document.getElementById("reason").textContent = now.reason || "";
    const actions = document.getElementById("actions");
    actions.replaceChildren(actionButtons(picture.fqn, now.actions, () => {}));
    const inputOf = {};
    for (const sg of (picture.physical || {subgraphs: []}).subgraphs) inputOf[sg.input] = sg.id;
    for (const node of svg.querySelectorAll("g.node")) {
      const n = picture[view].nodes.find((m) => m.id === node.dataset.node);
      const sg = n.kind === "table" ? now.subgraphs[inputOf[n.id]] : now.subgraphs[n.subgraph];
      const engine = now.engines[n.name];
      const line1 = node.querySelector(".line1"), line2 = node.querySelector(".line2");
      node.classList.remove(...[...node.classList].filter((c) => c.startsWith("status-") || c === "lagging"));
      node.classList.add("status-" + now.status);
      line1.textContent = ""; line2.textContent = "";
      if (sg && n.kind !== "table") {
        Object.assign(node.dataset, {rowsIn: sg.rows_in, rowsOut: sg.rows_out, rowsPerS: sg.rows_per_s,
                                     pendingRows: sg.pending_rows});
        line1.textContent = `in ${show(sg.rows_in)} · out ${show(sg.rows_out)} · ${show(sg.rows_per_s)} rows/s`;
        line2.textContent = `lag ${show(sg.pending_rows)} rows`;
        if (sg.pending_rows > 0) node.classList.add("lagging");
      } else if (sg) {  // a table a subgraph reads: its lag
        Object.assign(node.dataset, {pendingRows: sg.pending_rows, pendingVersions: sg.pending_versions});
        line1.textContent = `unread: ${show(sg.pending_versions)} versions, ${show(sg.pending_rows)} rows`;
      }
      if (engine) {
        Object.assign(node.dataset, {stateBytes: engine.state_bytes, keys: engine.keys, lateRows: engine.late_rows});
        line2.textContent += ` · state ${bytes(engine.state_bytes)} · ${show(engine.keys)} keys`;
      }
      node.querySelector(".error").textContent = (now.status === "failed" || now.status === "error") && n.kind !== "table"
        ? (now.reason || "").slice(0, 34) : "";
    }
    fill(document.getElementById("events"), now.events.slice().reverse(), [
      ["start_time", "time", (v) => when(v)], ["type", "event"], ["state", "state"], ["retries", "retries"],
      ["detail", "detail"], ["error_message", "why it failed"]], {empty: "no events"});
  }

  for (const radio of document.querySelectorAll('input[name="view"]')) {
    radio.disabled = radio.value === "physical" && !picture.physical;
    radio.addEventListener("change", () => { view = radio.value; draw(); });
  }
  draw();
  const live = document.getElementById("live");
  const source = new EventSource("/ui/api/graph/" + encodeURIComponent(picture.fqn) + "/live");
  source.onmessage = (event) => {
    numbers(JSON.parse(event.data));
    live.textContent = "live · " + new Date().toLocaleTimeString();
    live.dataset.updates = String(Number(live.dataset.updates || 0) + 1);
  };
  source.addEventListener("failure", (event) => { notice(JSON.parse(event.data).message); source.close(); });
  source.onerror = () => { live.textContent = "reconnecting…"; };
}

// -- checkpoints: a lane per subgraph, a bar per micro-batch ----------------------------------------------------
function checkpointsPage(page) {
  const jobs = page.jobs, svg = document.getElementById("timeline");
  const done = jobs.filter((j) => j.created_time && j.finished_time);
  const t0 = Math.min(...done.map((j) => j.created_time)), t1 = Math.max(...done.map((j) => j.finished_time));
  const lanes = [...new Set(jobs.map((j) => j.partition_id))].sort((a, b) => a - b);
  const W = 900, LANE = 26, LEFT = 110, span = Math.max(t1 - t0, 1e-3);
  svg.setAttribute("width", LEFT + W + 20);
  svg.setAttribute("height", LANE * lanes.length + 40);
  lanes.forEach((lane, i) => svg.append(el("svg:text", {class: "lane", x: 6, y: 20 + i * LANE + 13, text: "subgraph " + lane})));
  for (const j of jobs) {
    const i = lanes.indexOf(j.partition_id);
    const failed = !["SUCCESS", "PURGED"].includes(j.status);
    const start = j.created_time ? j.created_time : t1, end = j.finished_time ? j.finished_time : t1;
    const x = LEFT + ((start - t0) / span) * W, w = Math.max(((end - start) / span) * W, 2);
    svg.append(el("svg:rect", {class: "bar " + (failed ? "failed" : "ok"), x, y: 20 + i * LANE, width: w, height: LANE - 8,
                               "data-checkpoint": j.checkpoint_id, "data-subgraph": j.partition_id},
                  el("svg:title", {text: `subgraph ${j.partition_id} batch ${j.checkpoint_id}: ${j.status}` +
                    (j.finished_time ? `, ${(j.finished_time - j.created_time).toFixed(3)} s, ${j.rows_in} rows in` : "") +
                    (j.extra ? ` — ${j.extra}` : "")})));
  }
  if (done.length) {
    svg.append(el("svg:text", {x: LEFT, y: 14, class: "lane", text: when(t0)}));
    svg.append(el("svg:text", {x: LEFT + W, y: 14, class: "lane", "text-anchor": "end", text: when(t1)}));
  }
  const holder = document.getElementById("jobs");
  holder.replaceChildren();
  for (const j of jobs.slice().reverse().slice(0, 500)) {
    const failed = !["SUCCESS", "PURGED"].includes(j.status);
    const seconds = j.finished_time ? (j.finished_time - j.created_time).toFixed(3) + " s" : "";
    const table = el("table", {class: "grid"});
    const stages = j.subjobs.length ? Object.keys(j.subjobs[0]).filter((k) => k.endsWith("_s")) : [];
    fill(table, j.subjobs, [["subjob_id", "task"], ["status", "status"], ["rows_in", "rows in"],
                            ...stages.map((s) => [s, s.replace(/_s$/, "") + " (s)"])]);
    holder.append(el("details", {"data-checkpoint": j.checkpoint_id, "data-subgraph": j.partition_id,
                                 class: failed ? "failed" : null},
      el("summary", {text: `subgraph ${j.partition_id} · batch ${j.checkpoint_id} · ${j.status} · ${when(j.created_time)} ` +
        `· ${seconds} · rows ${show(j.rows_in)} in, ${show(j.rows_out)} out · versions ${j.input_versions || ""}` +
        (j.extra ? ` · ${j.extra}` : "")}), table));
  }
  if (!jobs.length) holder.append(el("p", {class: "hint", text: "no micro-batch recorded yet"}));
  fill(document.getElementById("config"), Object.entries(page.config).map(([k, v]) => ({k, v})),
       [["k", "setting"], ["v", "value"]]);
}

// -- tables ------------------------------------------------------------------------------------------------------
function tablesPage(rows) {
  fill(document.getElementById("tables"), rows, [
    ["fqn", "table", (v, row) => row.visibility === "public"
      ? el("a", {href: "/ui/table/" + encodeURIComponent(v), text: v}) : v],
    ["kind", "kind"], ["visibility", "visibility"], ["version", "version"], ["rows", "rows"],
    ["first_version", "first version kept"], ["retention", "retention"], ["graph_refs", "graphs"]],
    {rowAttrs: (row) => ({"data-table": row.fqn}), empty: "no tables yet"});
}

function tablePage(page) {
  fill(document.getElementById("meta"), [page.meta], [["kind", "kind"], ["visibility", "visibility"],
    ["version", "version"], ["rows", "rows"], ["first_version", "first version kept"], ["retention", "retention"],
    ["graph_refs", "graphs"]]);
  const info = page.info;
  fill(document.getElementById("schema"), info.schema.map(([name, type]) => ({name, type,
    role: [info.key_columns.includes(name) ? "key" : "", info.time_column === name ? "time" : ""].join(" ").trim()})),
    [["name", "column"], ["type", "type"], ["role", "role"]]);
  fill(document.getElementById("lineage"), page.lineage, [["graph", "graph", (v) =>
    el("a", {href: "/ui/graph/" + encodeURIComponent(v), text: v})], ["run", "run"], ["reads", "reads it"],
    ["writes", "writes it"], ["upstream", "from tables"], ["is_deleted", "dropped"]],
    {empty: "no graph reads or writes it"});
  const columns = page.sample.length ? Object.keys(page.sample[0]) : info.schema.map(([name]) => name);
  fill(document.getElementById("sample"), page.sample, columns.map((c) => [c, c]), {empty: "no rows yet"});
}

// -- SQL console ---------------------------------------------------------------------------------------------------
function sqlPage() {
  let result = null;
  const summary = document.getElementById("summary"), prev = document.getElementById("prev"),
        next = document.getElementById("next");
  const run = async (args) => {
    summary.textContent = "running…";
    try {
      const page = await fetchJson("/ui/api/sql", {method: "POST", body: JSON.stringify(args),
        headers: {"content-type": "application/json", "x-csrf-token": csrf}});
      result = page;
      const table = document.getElementById("result");
      table.replaceChildren(el("tr", {}, ...page.columns.map((c, i) => el("th", {text: c, title: page.types[i]}))));
      for (const row of page.rows) table.append(el("tr", {}, ...row.map((v) => el("td", {text: show(v),
        class: typeof v === "number" ? "num" : null}))));
      summary.textContent = `${page.total_rows.toLocaleString("en")} rows · page ${page.page} of ${page.pages}`;
      summary.dataset.totalRows = page.total_rows;
      prev.disabled = page.page <= 1;
      next.disabled = page.page >= page.pages;
      notice("");
    } catch (error) { summary.textContent = ""; notice(error.message); }
  };
  document.getElementById("sql-form").addEventListener("submit", (event) => {
    event.preventDefault();
    run({query: document.getElementById("query").value, catalog: document.getElementById("catalog").value || null});
  });
  prev.addEventListener("click", () => run({result: result.result, page: result.page - 1}));
  next.addEventListener("click", () => run({result: result.result, page: result.page + 1}));
}

// -- workers and users ---------------------------------------------------------------------------------------------
function workersPage(rows) {
  fill(document.getElementById("workers"), rows, [
    ["url", "worker"], ["group", "group"], ["alive", "alive", (v) => (v ? "yes" : "NO")], ["spark", "Spark"],
    ["cpu", "cpu %"], ["memory", "memory %"], ["heartbeat_age_s", "last heartbeat (s ago)"], ["graphs", "graphs placed"],
    ["spark_ui", "Spark UI", (v) => (typeof v === "string" && /^https?:\/\//.test(v)
      ? el("a", {href: v, target: "_blank", rel: "noopener", text: v}) : "off")]],
    {rowAttrs: (row) => ({"data-worker": row.url})});
}

function usersPage(page) {
  const holder = document.getElementById("users");
  holder.replaceChildren();
  for (const user of page.users) {
    const table = el("table", {class: "grid"});
    fill(table, user.privileges, [["principal", "who"], ["privilege", "privilege"], ["object", "on"],
                                  ["effect", "effect"]], {empty: "no grants"});
    holder.append(el("details", {"data-user": user.name, open: true},
      el("summary", {text: `${user.name}${user.is_admin ? " · admin" : ""}${user.groups ? " · groups: " + user.groups : ""}`}),
      table));
  }
  fill(document.getElementById("audit"), page.audit.slice().reverse(), [["time", "time", (v) => when(v)],
    ["user_name", "user"], ["action", "action"], ["object", "object"], ["outcome", "outcome"], ["detail", "detail"]]);
}

const PAGES = {graphs: graphsPage, graph: graphPage, checkpoints: checkpointsPage, tables: tablesPage,
               table: tablePage, sql: sqlPage, workers: workersPage, users: usersPage};
const render = PAGES[document.body.dataset.page];
if (render) render(data);
