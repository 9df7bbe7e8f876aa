// The asyncflow dashboard, part 2 of 7: SVG drawn by the page (no library, nothing from
// elsewhere): line charts of a history series, and the graph of a workflow run. Text goes in
// as text nodes only.
'use strict';

(() => {
  const { el } = window.AF;
  const NS = 'http://www.w3.org/2000/svg';

  /** An SVG element; attribute values are set as attributes, text as a text node. */
  function svg(tag, attrs = {}, text) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value !== undefined && value !== null) node.setAttribute(key, String(value));
    }
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function short(n) {
    if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  /**
   * A line chart of `points` (each with `at` and the series' keys): one line per series
   * ({key, label, cls}), a y axis from 0 to the largest value, the first and last times below.
   */
  function lineChart(title, points, series) {
    const W = 520;
    const H = 170;
    const L = 44;
    const B = 22;
    const T = 8;
    const box = el('figure', { class: 'chart', 'data-chart': title });
    box.append(el('figcaption', {}, title));
    const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
    const values = points.flatMap((p) => series.map((s) => Number(p[s.key]) || 0));
    const max = Math.max(1, ...values);
    const x = (i) => L + (points.length < 2 ? 0 : (i * (W - L - 6)) / (points.length - 1));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    for (const f of [0, 0.5, 1]) {
      chart.append(svg('line', { x1: L, x2: W - 6, y1: y(max * f), y2: y(max * f), class: 'grid' }));
      chart.append(svg('text', { x: L - 4, y: y(max * f) + 4, 'text-anchor': 'end', class: 'axis' }, short(max * f)));
    }
    if (points.length) {
      const time = (p) => new Date(p.at).toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
      chart.append(svg('text', { x: L, y: H - 6, class: 'axis' }, time(points[0])));
      chart.append(svg('text', { x: W - 6, y: H - 6, 'text-anchor': 'end', class: 'axis' }, time(points[points.length - 1])));
    }
    for (const s of series) {
      const d = points.map((p, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(Number(p[s.key]) || 0).toFixed(1)}`).join(' ');
      if (d) chart.append(svg('path', { d, class: `series ${s.cls}`, 'data-series': s.key }));
    }
    box.append(chart);
    const legend = el('div', { class: 'legend' });
    for (const s of series) {
      const total = points.reduce((sum, p) => sum + (Number(p[s.key]) || 0), 0);
      legend.append(el('span', { class: `key ${s.cls}` }, `${s.label}${s.sum ? ` (${short(total)})` : ''}`));
    }
    box.append(legend);
    return box;
  }

  /** [from, to] of an edge written as a pair or as {from, to}. */
  function ends(edge) {
    if (Array.isArray(edge)) return [String(edge[0]), String(edge[1])];
    return edge && typeof edge === 'object' ? [String(edge.from), String(edge.to)] : [null, null];
  }

  /**
   * The graph of a run: `nodes` in plan order (each {node, type, status, segments}), `edges`
   * from the pipeline's definition. Columns by longest path from a node without in-edges.
   */
  function dag(nodes, edges) {
    const names = nodes.map((n) => n.node);
    const known = new Set(names);
    const pairs = (Array.isArray(edges) ? edges : []).map(ends).filter(([a, b]) => known.has(a) && known.has(b));
    const depth = new Map(names.map((n) => [n, 0]));
    // plan order is a topological order: one pass settles the longest paths
    for (const n of names) for (const [a, b] of pairs) if (a === n) depth.set(b, Math.max(depth.get(b), depth.get(a) + 1));
    const columns = new Map();
    for (const n of names) {
      const d = depth.get(n);
      if (!columns.has(d)) columns.set(d, []);
      columns.get(d).push(n);
    }
    const NW = 150;
    const NH = 46;
    const GX = 60;
    const GY = 24;
    const rowsMax = Math.max(1, ...[...columns.values()].map((c) => c.length));
    const width = columns.size * (NW + GX) + 20;
    const height = rowsMax * (NH + GY) + 20;
    const pos = new Map();
    for (const [d, col] of columns) {
      col.forEach((n, i) => {
        const offset = ((rowsMax - col.length) * (NH + GY)) / 2;
        pos.set(n, { x: 10 + d * (NW + GX), y: 10 + offset + i * (NH + GY) });
      });
    }
    const graph = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': 'run graph' });
    const defs = svg('defs');
    const marker = svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' });
    marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow' }));
    defs.append(marker);
    graph.append(defs);
    for (const [a, b] of pairs) {
      const p = pos.get(a);
      const q = pos.get(b);
      const mid = (p.x + NW + q.x) / 2;
      graph.append(svg('path', {
        d: `M${p.x + NW},${p.y + NH / 2} C${mid},${p.y + NH / 2} ${mid},${q.y + NH / 2} ${q.x},${q.y + NH / 2}`,
        class: 'edge',
        'marker-end': 'url(#arrow)',
        'data-edge': `${a}>${b}`,
      }));
    }
    for (const n of nodes) {
      const p = pos.get(n.node);
      const g = svg('g', { class: `node status-${n.status}`, 'data-node': n.node, 'data-status': n.status, transform: `translate(${p.x},${p.y})` });
      g.append(svg('title', {}, `${n.node} (${n.type}): ${n.status}${n.error ? ` — ${n.error}` : ''}`));
      g.append(svg('rect', { width: NW, height: NH, rx: 6 }));
      g.append(svg('text', { x: 10, y: 19, class: 'name' }, n.node.length > 20 ? `${n.node.slice(0, 19)}…` : n.node));
      let sub = `${n.type} · ${n.status}`;
      if (Array.isArray(n.segments) && n.segments.length) {
        const done = n.segments.filter((s) => s.status === 'succeeded').length;
        sub += ` · ${done}/${n.segments.length} seg`;
      }
      g.append(svg('text', { x: 10, y: 36, class: 'sub', 'data-segments': Array.isArray(n.segments) ? n.segments.length : '' }, sub));
      graph.append(g);
    }
    return graph;
  }

  Object.assign(window.AF, { lineChart, dag });
})();
