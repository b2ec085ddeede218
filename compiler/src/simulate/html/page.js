// The timeline picture (docs/simulation.md#the-timeline-picture): draws the
// data `rulec simulate --html` embeds. One mark per output line (its
// `data-kind`), one per drawn timeline entry (`data-entry`); the counts of
// both are written to <body> after the first drawing, for the CI test.
'use strict';
// A script error anywhere (a handler included) is written down for the test.
window.addEventListener('error', (e) => { document.body.dataset.error = e.message; });
(function () {
  const started = performance.now();
  const data = JSON.parse(document.getElementById('timeline-data').textContent);
  const lines = data.lines;
  const rules = new Map(data.rules.map((rule) => [rule.name, rule]));
  const LEFT = 210, RIGHT = 110, AXIS = 36; // RIGHT: room for the last labels
  const RULE_H = 56, BUS_H = 58;
  // Where each kind of line is drawn: [row, shape]; a kind not listed gets
  // the generic mark, so a kind added later is still drawn and counted.
  const STYLE = {
    'run-start': ['bar', 'start'], 'run-end': ['bar', 'end'],
    'action': ['top', 'tick'], 'action-failed': ['top', 'cross'],
    'record-put': ['bar', 'square'], 'record-drop': ['bar', 'hollow'], 'record-kept': ['bar', 'square'],
    'replay-resume': ['bar', 'start'], 'replay-drop': ['bot', 'cross'], 'due-wait': ['bot', 'hourglass'],
    'step-skipped': ['bot', 'dot'], 'non-fire': ['bot', 'dot'], 'eval-error': ['bot', 'warn'],
    'trigger-dropped': ['bot', 'dot'], 'trigger-queued': ['bot', 'dot'],
    'trigger-refused': ['bot', 'cross'], 'trigger-suppressed': ['bot', 'dot'],
    'derived': ['out', 'diamond'], 'restart': ['out', 'rule'], 'reload': ['out', 'rule'], 'end': ['out', 'rule'],
    'finally-start': ['bot', 'flag'],
    // The envelope (docs/safety.md): a guard's refusal on the action row,
    // a refusal's dashboard toast on the bus.
    'guarded': ['top', 'shield'], 'toast': ['out', 'tri'],
  };
  const ROW_Y = { top: 23, bar: 24, bot: 42, in: 14, ev: 30, out: 47 };
  const BAND = { run: [17, 14], wait: [19.5, 9], window: [16, 16] }; // [top, height] in a rule's lane
  const ENDED = new Set(['cancelled', 'stopped', 'restarted', 'reloaded', 'refused', 'failed', 'too-late', 'guarded', 'limited']);
  // The envelope's refusals no line names (docs/safety.md): a limit's
  // name (its first refusal of a window) and a breaker's trip, per rule.
  const refusals = data.refusals || [];
  // The guard a `guarded` line names: `guard NAME: what it read`.
  const guardOf = (line) => { const m = /^guard (\S+):/.exec(line.message || ''); return m ? m[1] : '?'; };
  // The limit of a rule's `limited` run end: its last refusal logged by then.
  function limitOf(rule, t) {
    let name = '?';
    for (const r of refusals) {
      if (r.code === 'limited' && r.rule === rule && r.at_ms <= t) {
        const m = /limit `([^`]*)`/.exec(r.message);
        if (m) name = m[1];
      }
    }
    return name;
  }
  function refusalLabel(line) {
    // A guarded run's `guarded` line, just before, names the guard.
    if (line.reason === 'limited') return 'limited by ' + limitOf(line.rule, line.at_ms);
    return line.reason;
  }

  const lanes = [];
  const laneByRule = new Map();
  const bus = addLane('bus', 'bus', BUS_H);
  const marks = []; // {i | entry, kind, lane, row, t, shape, label, fin, exp}
  const spans = []; // {lane (null: every lane), t0, t1, cls, text, open}
  const vrules = []; // {t, cls, label, mark}
  const expected = new Set(data.test ? data.test.marked : []);
  let tMax = 0;

  function addLane(name, kind, height) {
    const lane = { name, kind, height, y: 0, marks: [] };
    lanes.push(lane);
    return lane;
  }
  function ruleLane(name) {
    if (!laneByRule.has(name)) laneByRule.set(name, addLane(name, 'rule', RULE_H));
    return laneByRule.get(name);
  }
  data.rules.forEach((rule) => ruleLane(rule.name));

  // A duration as people write it: `300 ms`, `30 s`, `1.5 s`, `5 min`, `-1 h`.
  function fmt(ms) {
    const units = [[3600000, ' h'], [60000, ' min'], [1000, ' s']];
    const unit = units.find(([size]) => Math.abs(ms) >= size && ms % size === 0) || (Math.abs(ms) >= 1000 ? [1000, ' s'] : [1, ' ms']);
    return +(ms / unit[0]).toFixed(3) + unit[1];
  }
  const esc = (text) => String(text).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
  const cls = (text) => String(text).replace(/[^a-z0-9-]/gi, '_');
  // A line as `rulec simulate` prints it in text.
  function textOf(line) {
    let text = String(line.at_ms).padStart(8) + ' ms  ' + line.kind.padEnd(18);
    for (const [key, value] of Object.entries(line)) {
      if (key !== 'at_ms' && key !== 'kind') text += ' ' + key + '=' + (Array.isArray(value) ? '[' + value.join(',') + ']' : value);
    }
    return text.trimEnd();
  }
  function entryText(entry) {
    const fields = Object.entries(entry.fields).filter(([key]) => key !== 'at')
      .map(([key, value]) => key + '=' + (typeof value === 'object' ? JSON.stringify(value) : value));
    return '[[' + entry.entry + ']] #' + entry.number + ' at ' + entry.at_ms + ' ms  ' + fields.join(' ');
  }
  function actionLabel(line) {
    if (line.action === 'redis') return line.list + ' ← ' + line.push;
    if (line.action === 'exec') return 'exec ' + String(line.command).split('/').pop();
    if (line.action === 'can') return 'can ' + line.iface + ' ' + line.id + (line.data ? '#' + line.data : '');
    if (line.action === 'notify') {
      let toast = {};
      try { toast = JSON.parse(line.message); } catch (e) { /* shown raw below */ }
      return 'notify ' + (toast.title !== undefined ? '“' + toast.title + '”' : line.message);
    }
    if (line.action === 'publish') return line.channel + ' ⇐ ' + line.message;
    return line.action || line.kind;
  }
  // A `finally` step's lines carry the field `finally`.
  const isFinally = (line) => line.finally !== undefined && line.finally !== false && line.finally !== null;

  function mark(i, lane, row, shape, label) {
    const line = lines[i];
    // A finally step's own lines, and the line that starts them (a cancel).
    const fin = isFinally(line) || line.kind === 'finally-start';
    const m = { i, kind: line.kind, reason: line.reason, lane, row, t: line.at_ms, shape, label: isFinally(line) ? 'finally ' + label : label, fin, exp: expected.has(i) };
    marks.push(m);
    lane.marks.push(m);
    return m;
  }
  function span(lane, t0, t1, klass, text, open) {
    spans.push({ lane, t0, t1: Math.max(t0, t1), cls: klass, text, open });
  }

  // --- runs, waits and windows, from the lines in order ------------------
  const runs = new Map();
  function runOf(line, lane) {
    let run = runs.get(line.run);
    if (!run) {
      run = { lane, id: line.run, rule: line.rule, seg: null, last: line.at_ms, next: null, wait: null };
      runs.set(line.run, run);
    }
    return run;
  }
  // The step after (step, pass) of a rule (step -1: its first) and the
  // wait before it; null after the last.
  function nextStep(ruleName, step, pass) {
    const rule = rules.get(ruleName);
    if (!rule) return null;
    if (step + 1 < rule.steps.length) {
      const next = rule.steps[step + 1];
      return { step: step + 1, pass, wait: next.after_ns / 1e6, durable: next.durable };
    }
    if (pass + 1 < rule.repeat.count) {
      const first = rule.steps[0];
      return { step: 0, pass: pass + 1, wait: (rule.repeat.every_ns + first.after_ns) / 1e6, durable: first.durable };
    }
    return null;
  }
  function closeRun(run, t, reason) {
    if (run.seg !== null) span(run.lane, run.seg, t, 'run r-' + cls(reason), 'run ' + run.id + ': ' + fmt(run.seg) + ' to ' + fmt(t) + ', ' + reason, reason === 'live');
    run.seg = null;
  }
  function waitText(run, step, durable) {
    return run.id + ' step ' + step + ': an `after` wait, ' + (durable ? 'durable (a pending record: it survives a restart)' : 'not durable (lost at a restart)');
  }
  function closeWait(run, t, open) {
    if (run.wait) span(run.lane, run.wait.t0, t, 'wait durable', waitText(run, run.wait.step, true), open);
    run.wait = null;
  }
  // A wait that is not durable leaves no line: the gap before its step's
  // action (or before the end that cut it) is where it was.
  function volatileWait(run, t, cut) {
    const next = run.next;
    if (run.wait || !next || next.wait <= 0 || next.durable) return;
    const t0 = cut ? run.last : Math.max(run.last, t - next.wait);
    if (t > t0) span(run.lane, t0, t, 'wait volatile', waitText(run, next.step, false) + (cut ? ', cut short' : ''));
  }
  // Debounce windows and `for` holds (docs/semantics.md#hold): opened by
  // explain's non-fire lines, closed by the decision after them, never
  // longer than the rule allows (a cancel ends a hold without a line).
  const windows = new Map(); // lane -> {t0, last, kind}
  const OPENS = { 'debounce-held': 'debounce', 'debounce-reset': 'debounce', 'hold-pending': 'hold' };
  const DECIDES = new Set(['cooldown', 'dropped', 'queued', 'refused', 'rule-disabled']);
  const WORDS = { debounce: 'a debounce window', hold: 'a `for` hold' };
  const windowEnd = (rule, w) => w.last + (rule ? (w.kind === 'debounce' ? rule.debounce_ns : rule.hold_ns) / 1e6 : Infinity);
  function closeWindow(lane, rule, w, t, why) {
    span(lane, w.t0, Math.min(t, windowEnd(rule, w)), 'window ' + w.kind, WORDS[w.kind] + why);
    windows.delete(lane);
  }
  function trackWindow(lane, line) {
    const rule = rules.get(line.rule), t = line.at_ms;
    let open = windows.get(lane);
    if (open && t > windowEnd(rule, open)) { closeWindow(lane, rule, open, t, ''); open = null; }
    const opens = line.kind === 'non-fire' && OPENS[line.reason];
    if (opens) {
      if (!open) windows.set(lane, { t0: t, last: t, kind: opens });
      else if (opens === 'debounce') open.last = t; // a reset: the window starts again
    } else if (line.kind === 'run-start') {
      if (open) closeWindow(lane, rule, open, t, ', then its run');
      else if (rule && (rule.debounce_ns > 0 || rule.hold_ns > 0)) {
        const kind = rule.debounce_ns > 0 ? 'debounce' : 'hold';
        span(lane, t - (rule.debounce_ns + rule.hold_ns) / 1e6, t, 'window ' + kind, WORDS[kind] + ', then its run');
      }
    } else if (open && open.kind === 'hold' && line.kind === 'non-fire' && /^when-/.test(line.reason)) {
      closeWindow(lane, rule, open, t, ', broken: ' + line.reason);
    } else if (open && (line.kind.startsWith('trigger-') || (line.kind === 'non-fire' && DECIDES.has(line.reason)))) {
      closeWindow(lane, rule, open, t, ', then ' + (line.reason || line.kind));
    }
  }

  function place(i) {
    const line = lines[i];
    const t = line.at_ms;
    tMax = Math.max(tMax, t);
    const style = STYLE[line.kind];
    const lane = line.rule !== undefined ? ruleLane(line.rule) : bus;
    if (!style) return mark(i, lane, lane === bus ? 'out' : 'bot', 'generic', line.kind);
    const [row, shape] = style;
    const run = line.run !== undefined && lane !== bus ? runOf(line, lane) : null;
    if (lane !== bus) trackWindow(lane, line);
    switch (line.kind) {
      case 'run-start':
        if (run) { run.seg = t; run.last = t; run.next = nextStep(line.rule, -1, 0); }
        return mark(i, lane, row, shape, '');
      case 'action':
        if (run) {
          if (run.seg === null) run.seg = t;
          volatileWait(run, t, false);
          run.last = t; run.next = nextStep(line.rule, line.step, line.pass);
        }
        return mark(i, lane, row, shape, actionLabel(line));
      case 'record-put': case 'replay-resume':
        if (run && !run.wait) run.wait = { t0: t, step: line.step };
        if (run && line.kind === 'replay-resume') { run.seg = t; run.last = t; }
        return mark(i, lane, row, shape, line.kind === 'replay-resume' ? 'replayed' : '');
      case 'record-drop':
        if (run) { closeWait(run, t, false); run.last = t; }
        return mark(i, lane, row, shape, line.reason === 'started' ? '' : line.reason);
      case 'run-end':
        if (run) {
          if (ENDED.has(line.reason)) volatileWait(run, t, true);
          closeRun(run, t, line.reason);
          if (!run.wait) runs.delete(line.run);
        }
        return mark(i, lane, line.reason === 'cancelled' ? 'bar' : row, line.reason === 'cancelled' ? 'cancel' : shape, line.reason === 'done' ? '' : refusalLabel(line));
      case 'guarded':
        return mark(i, lane, row, shape, 'guarded by ' + guardOf(line));
      case 'toast': {
        let toast = {};
        try { toast = JSON.parse(String(line.message).replace(/^PUBLISH \S+ /, '')); } catch (e) { /* the raw line is in the tip */ }
        return mark(i, lane, row, shape, 'toast ' + (toast.body !== undefined ? '“' + toast.body + '”' : ''));
      }
      case 'restart': case 'reload': case 'end': {
        const label = line.kind === 'reload' ? 'reload ' + line.bundle : line.kind;
        const m = mark(i, bus, row, shape, '');
        vrules.push({ t, cls: 'k-' + line.kind, label, mark: m });
        if (line.kind === 'end') finish(t);
        return m;
      }
      case 'derived':
        return mark(i, bus, row, shape, line.topic + (line.to !== undefined ? ' → ' + line.to : ''));
      case 'non-fire':
        return mark(i, lane, row, line.reason === 'tripped' ? 'cross' : shape, line.reason);
      case 'eval-error':
        return mark(i, lane, row, shape, 'eval-error');
      case 'finally-start':
        return mark(i, lane, row, shape, 'finally');
      default:
        return mark(i, lane, row, shape, line.kind.replace(/^trigger-/, '') + (line.reason ? ' ' + line.reason : ''));
    }
  }
  // At `end`: what is still running or waiting, and the windows still held.
  function finish(t) {
    for (const run of runs.values()) { closeWait(run, t, true); closeRun(run, t, 'live'); }
    for (const [lane, open] of windows) {
      const rule = rules.get(lane.name), until = windowEnd(rule, open);
      span(lane, open.t0, Math.min(t, until), 'window ' + open.kind, WORDS[open.kind] + (until > t ? ', still open at the end' : ''), until > t);
    }
  }

  // --- the timeline's own entries ------------------------------------------
  const downs = [];
  // The simulation stops at `end`: entries after it never happened.
  const endLine = lines.find((line) => line.kind === 'end');
  const endAt = endLine ? endLine.at_ms : Infinity;
  function placeEntry(entry) {
    const t = entry.at_ms;
    const f = entry.fields;
    if (t > endAt) return null;
    const upAgain = Math.min(endAt, t + (entry.down_ms || 0));
    tMax = Math.max(tMax, upAgain);
    const lost = downs.some(([from, to]) => t >= from && t < to);
    const add = (shape, label) => {
      const m = { entry, kind: entry.entry, lane: bus, row: entry.entry === 'event' ? 'ev' : 'in', t, shape, label, lost };
      marks.push(m); bus.marks.push(m);
      return m;
    };
    switch (entry.entry) {
      case 'event': return add('dot', f.topic);
      case 'message': return add('tri', f.channel);
      case 'state': {
        const what = f.clear ? ' cleared' : f.replace ? ' replaced' : f.delete ? '.' + f.field + ' deleted'
          : f.field !== undefined ? '.' + f.field + '=' + (f.value !== undefined ? f.value : '') : ' ' + JSON.stringify(f.fields || {});
        return add('square', f.hash + what);
      }
      case 'clock': return vrules.push({ t, cls: 'k-clock', label: 'clock ' + (entry.jump_ms >= 0 ? '+' : '') + fmt(entry.jump_ms), entry });
      case 'restart':
        downs.push([t, upAgain]);
        return span(null, t, upAgain, 'down', 'the service is down: ' + fmt(t) + ' to ' + fmt(upAgain) + ' (' + entryText(entry) + ')');
      case 'fail': {
        const until = entry.until_ms !== undefined ? Math.min(entry.until_ms, endAt) : null;
        spans.push({ lane: ruleLane(f.rule), t0: t, t1: until, cls: 'fail', text: entryText(entry) + ': its actions fail', open: until === null });
        return null;
      }
      default: return null; // [[reload]]: its `reload` line is drawn
    }
  }
  data.entries.filter((e) => e.entry === 'restart').forEach(placeEntry);
  data.entries.filter((e) => e.entry !== 'restart').forEach(placeEntry);
  lines.forEach((line, i) => place(i));
  // A tripped breaker: the rule's triggers refused for its pause, drawn
  // over its lane up to the end.
  for (const r of refusals) {
    if (r.code !== 'tripped' || r.rule === undefined || r.rule === null) continue;
    const rule = rules.get(r.rule);
    const pause = rule && rule.trip ? rule.trip.pause_ns / 1e6 : (/refused for (\d+) ms/.exec(r.message) || [0, 0])[1] * 1;
    const until = Math.min(endAt === Infinity ? tMax : endAt, r.at_ms + pause);
    span(ruleLane(r.rule), r.at_ms, until, 'tripped', 'tripped at ' + fmt(r.at_ms) + ': ' + r.message);
  }
  for (const s of spans) if (s.t1 === null) s.t1 = tMax;
  if (data.test && data.test.window) {
    const w = data.test.window;
    span(data.test.rule ? ruleLane(data.test.rule) : null, w.from_ms, w.to_ms, 'expected', 'expected here: ' + data.test.expectation);
  }
  // Backgrounds first, then runs, the waits inside them, and the windows.
  const LAYER = { down: 0, fail: 0, expected: 0, tripped: 0, run: 1, wait: 2, window: 3 };
  spans.sort((a, b) => LAYER[a.cls.split(' ')[0]] - LAYER[b.cls.split(' ')[0]]);
  let y = 0;
  for (const lane of lanes) {
    lane.y = y; y += lane.height;
    lane.marks.sort((a, b) => a.t - b.t);
    // Each mark's next neighbour in its row: a label stops before it.
    const next = {};
    for (let k = lane.marks.length - 1; k >= 0; k--) {
      const m = lane.marks[k];
      const later = next[m.row];
      m.nextT = later && later.t > m.t ? later.t : later ? later.nextT : Infinity;
      next[m.row] = m;
    }
  }
  const height = y;

  // --- drawing -------------------------------------------------------------
  const axis = document.getElementById('axis');
  const svg = document.getElementById('lanes');
  const plot = document.getElementById('plot');
  const pad = Math.max(50, tMax * 0.02);
  let v0 = -pad, v1 = tMax + pad;
  const width = () => Math.max(plot.clientWidth, LEFT + 200);
  const scale = () => (width() - LEFT - RIGHT) / (v1 - v0);
  const xOf = (t) => LEFT + (t - v0) * scale();
  const tOf = (x) => v0 + (x - LEFT) / scale();

  // A mark's class and data attribute, made once: drawing is redone on every zoom.
  function markAttrs(m) {
    const extra = (m.shape === 'generic' ? ' other' : '') + (m.reason ? ' r-' + cls(m.reason) : '') + (m.fin ? ' fin' : '') + (m.lost ? ' lost' : '');
    const data = m.entry ? 'data-entry="' + cls(m.kind) + '"' : 'data-kind="' + esc(m.kind) + '"';
    return 'class="m k-' + cls(m.kind) + extra + '" ' + data;
  }
  // A mark's outline as path data, exactly one `M` each: the marks of one
  // kind and look are drawn as one <path>, so 10,000 lines are a few
  // elements, and the page counts marks by their `M`s.
  function shapeD(m, x, y) {
    switch (m.shape) {
      case 'tick': return 'M' + x + ' ' + (y - 9) + 'v18';
      case 'start': return 'M' + x + ' ' + (y - 6) + 'l7 6l-7 6z';
      case 'end': return 'M' + x + ' ' + (y - 8) + 'v16';
      case 'cancel': case 'cross': return 'M' + (x - 4) + ' ' + (y - 4) + 'l8 8m0 -8l-8 8';
      case 'dot': return 'M' + (x - 3.5) + ' ' + y + 'a3.5 3.5 0 1 0 7 0a3.5 3.5 0 1 0 -7 0';
      case 'hollow': return 'M' + (x - 3) + ' ' + y + 'a3 3 0 1 0 6 0a3 3 0 1 0 -6 0';
      case 'square': return 'M' + (x - 3) + ' ' + (y - 3) + 'h6v6h-6z';
      case 'diamond': return 'M' + x + ' ' + (y - 5) + 'l5 5l-5 5l-5 -5z';
      case 'tri': return 'M' + x + ' ' + (y - 5) + 'l5 9h-10z';
      case 'hourglass': return 'M' + (x - 4) + ' ' + (y - 5) + 'h8l-8 10h8z';
      case 'warn': return 'M' + x + ' ' + (y - 6) + 'l6 11h-12z';
      case 'flag': return 'M' + x + ' ' + (y + 6) + 'v-13h7l-2 3l2 3h-7';
      case 'shield': return 'M' + (x - 5) + ' ' + (y - 6) + 'h10v5q0 5 -5 8q-5 -3 -5 -8z';
      case 'rule': return 'M' + x + ' 0V' + height;
      default: return 'M' + (x - 4) + ' ' + (y - 4) + 'h8v8h-8z';
    }
  }
  // Path data gathered by look (class and data attribute), then drawn as
  // one <path> per look, in the order the looks first came.
  function bucket() {
    const looks = new Map();
    return {
      add(attrs, d) { const list = looks.get(attrs); if (list) list.push(d); else looks.set(attrs, [d]); },
      draw(out) { for (const [attrs, list] of looks) out.push('<path ' + attrs + ' d="' + list.join('') + '"/>'); },
    };
  }
  function niceStep(msPerPx) {
    const raw = msPerPx * 90;
    const pow = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-3))));
    return [1, 2, 5, 10].map((f) => f * pow).find((s) => s >= raw);
  }
  function tickLabel(t, step) {
    if (step >= 60000) {
      const two = (n) => String(n).padStart(2, '0'), s = Math.round(t / 1000);
      return (s >= 3600 ? Math.floor(s / 3600) + ':' + two(Math.floor(s / 60) % 60) : Math.floor(s / 60)) + ':' + two(s % 60);
    }
    return (t / 1000).toFixed(step >= 1000 ? 0 : step >= 100 ? 1 : step >= 10 ? 2 : 3) + ' s';
  }
  // The first index of `list` (sorted by t) at or after `t`.
  function lowerBound(list, t) {
    let lo = 0, hi = list.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (list[mid].t < t) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function drawSpans(out, w) {
    const from = tOf(LEFT), to = tOf(w);
    const rects = bucket();
    for (const s of spans) {
      if (s.t1 < from || s.t0 > to) continue;
      const x0 = Math.max(LEFT, xOf(s.t0)), x1 = Math.min(w, xOf(s.t1));
      const wide = Math.max(1.5, x1 - x0).toFixed(1);
      let top, h;
      const band = BAND[s.cls.split(' ')[0]];
      if (!s.lane) { top = 0; h = height; }
      else if (band) { top = s.lane.y + band[0]; h = band[1]; }
      else { top = s.lane.y + 2; h = s.lane.height - 4; }
      rects.add('class="s ' + s.cls + (s.open ? ' open' : '') + '"', 'M' + x0.toFixed(1) + ' ' + top + 'h' + wide + 'v' + h + 'h-' + wide + 'z');
    }
    rects.draw(out);
  }
  function drawMarks(out, labels, w) {
    const from = tOf(LEFT - 8), to = tOf(w + 8);
    const rings = bucket(), paths = bucket();
    for (const lane of lanes) {
      const ends = {};
      for (let k = lowerBound(lane.marks, from); k < lane.marks.length; k++) {
        const m = lane.marks[k];
        if (m.t > to) break;
        const x = Math.round(xOf(m.t) * 10) / 10, y = lane.y + ROW_Y[m.row];
        if (m.exp) rings.add('class="ring"', 'M' + (x - 9) + ' ' + y + 'a9 9 0 1 0 18 0a9 9 0 1 0 -18 0');
        paths.add(m.attrs || (m.attrs = markAttrs(m)), shapeD(m, x, y));
        if (!m.label || x < LEFT || m.shape === 'rule') continue;
        const placed = placeLabel(m, x, ends[m.row] || LEFT, w);
        if (!placed) continue;
        ends[m.row] = placed.end;
        const ly = lane.y + (m.row === 'top' ? 11 : ROW_Y[m.row] + 4);
        labels.push('<text class="l' + (m.fin ? ' fin' : '') + '" x="' + placed.x + '" y="' + ly + '"' + (placed.left ? ' text-anchor="end"' : '') + '>' + esc(placed.text) + '</text>');
      }
    }
    rings.draw(out);
    paths.draw(out);
  }
  // Label widths as drawn (11px, bold for `finally`), measured once each.
  const measure = (function () {
    const ctx = document.createElement('canvas').getContext('2d');
    const widths = new Map();
    return (text, bold) => {
      const key = (bold ? 'b' : 'n') + text;
      if (!widths.has(key)) {
        ctx.font = (bold ? '600 ' : '') + '11px system-ui, sans-serif';
        widths.set(key, ctx.measureText(text).width + 1);
      }
      return widths.get(key);
    };
  })();
  // `text`, or its longest head with `…` that is at most `room` wide (at
  // least four characters); null when even that does not fit.
  function fitLabel(text, room, bold) {
    if (measure(text, bold) <= room) return text;
    let lo = 3, hi = text.length - 1; // lo fits or is too few
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (measure(text.slice(0, mid) + '…', bold) <= room) lo = mid; else hi = mid - 1;
    }
    return lo >= 4 && measure(text.slice(0, lo) + '…', bold) <= room ? text.slice(0, lo) + '…' : null;
  }
  // Where a mark's label goes, inside its lane and the picture: right of
  // the mark up to the next mark of its row (a tick's label may run over
  // the ticks after it: they sit below it) and the right edge; when it
  // must be cut there, left of the mark if it fits whole after `after`
  // (where the row's last label ended). {x, text, left, end} or null.
  function placeLabel(m, x, after, w) {
    const gap = m.row === 'top' ? 2 : 7;
    const right = Math.min(w - 4, m.row === 'top' ? Infinity : xOf(m.nextT) - 6);
    const text = x + gap > after ? fitLabel(m.label, right - x - gap, m.fin) : null;
    if (text === m.label) return { x: x + gap, text, left: false, end: x + gap + measure(text, m.fin) + 6 };
    const whole = measure(m.label, m.fin);
    if (x - gap - whole > Math.max(after, LEFT + 2)) return { x: x - gap, text: m.label, left: true, end: x + 6 };
    return text ? { x: x + gap, text, left: false, end: x + gap + measure(text, m.fin) + 6 } : null;
  }
  function render() {
    const w = width();
    const step = niceStep(1 / scale());
    const out = ['<defs><pattern id="hatch-durable" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#d7e6fb"/><path d="M0 0V6" stroke="#1b6ac9" stroke-width="2.5"/></pattern>',
      '<pattern id="hatch-volatile" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f2f2f2"/><path d="M0 0V6" stroke="#9a9a9a" stroke-width="1.5"/></pattern>',
      '<pattern id="hatch-down" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><path d="M0 0V8" stroke="#b0b0b0" stroke-width="1"/></pattern>',
      '<clipPath id="clip"><rect x="' + LEFT + '" y="0" width="' + (w - LEFT) + '" height="' + height + '"/></clipPath></defs>'];
    const grid = [], ticks = [];
    for (let n = Math.ceil(tOf(LEFT) / step); n * step <= tOf(w); n++) {
      const t = n * step, x = xOf(t).toFixed(1);
      grid.push('<path class="grid" d="M' + x + ' 0V' + height + '"/>');
      ticks.push('<path class="grid" d="M' + x + ' 32V' + AXIS + '"/><text class="tick" x="' + x + '" y="30">' + tickLabel(t, step) + '</text>');
    }
    lanes.forEach((lane, k) => out.push('<rect class="lane' + (k % 2 ? ' odd' : '') + (lane === bus ? ' bus' : '') + '" x="0" y="' + lane.y + '" width="' + w + '" height="' + lane.height + '"/>'));
    out.push('<g clip-path="url(#clip)">', grid.join(''));
    drawSpans(out, w);
    // Labels under the marks: a label never hides a mark.
    const labels = [], drawn = [];
    drawMarks(drawn, labels, w);
    out.push(labels.join(''), drawn.join(''));
    const ruleEnds = [0, 0]; // two rows of labels above the axis
    for (const r of vrules.sort((a, b) => a.t - b.t)) {
      if (r.t < tOf(LEFT) || r.t > tOf(w)) continue;
      const x = +xOf(r.t).toFixed(1);
      if (r.entry) out.push('<path class="vr ' + r.cls + '" data-entry="clock" d="M' + x + ' 0V' + height + '"/>');
      const row = ruleEnds.findIndex((end) => x > end);
      if (row < 0) continue;
      // Near the right edge the label goes left of its rule.
      const wide = measure(r.label, false), left = x + 3 + wide > w - 2;
      ticks.push('<text class="vl ' + r.cls + '" x="' + (left ? x - 3 : x + 3) + '" y="' + (10 + row * 10) + '"' + (left ? ' text-anchor="end"' : '') + '>' + esc(r.label) + '</text>');
      ruleEnds[row] = x + (left ? 0 : wide) + 8;
    }
    out.push('</g>');
    for (const lane of lanes) {
      out.push('<text class="name' + (lane === bus ? ' bus' : '') + '" x="8" y="' + (lane.y + 20) + '">' + esc(lane.name.length > 30 ? lane.name.slice(0, 29) + '…' : lane.name) + '</text>');
      if (lane === bus) out.push('<text class="sub" x="8" y="' + (lane.y + 36) + '">timeline in, derived out</text>');
    }
    out.push('<path class="hover" id="hover" d=""/>');
    svg.setAttribute('width', w); svg.setAttribute('height', height);
    axis.setAttribute('width', w); axis.setAttribute('height', AXIS);
    svg.innerHTML = out.join('');
    axis.innerHTML = '<rect class="axis" width="' + w + '" height="' + AXIS + '"/><g>' + ticks.join('') + '</g><text class="tick unit" x="8" y="30">time since the start</text>';
  }
  let pending = false;
  function later() { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(); }); } }

  // --- zoom, pan, pointing -------------------------------------------------
  function zoom(factor, around) {
    const c = around === undefined ? (v0 + v1) / 2 : around;
    const span = Math.max(1, (v1 - v0) * factor);
    v0 = c - (c - v0) * (span / (v1 - v0)); v1 = v0 + span;
    later();
  }
  function fit() { v0 = -pad; v1 = tMax + pad; burst = -1; burstText.textContent = ''; later(); }
  // Bursts: the marks' times, split wherever a quiet gap is longer than an
  // eighth of the whole (so there are at most nine); the "bursts" control
  // zooms to each in turn, a burst of one instant to a hundredth of the whole.
  const bursts = [];
  for (const t of marks.map((m) => m.t).sort((a, b) => a - b)) {
    const last = bursts[bursts.length - 1];
    if (last && t - last[1] <= Math.max(1, tMax / 8)) last[1] = t; else bursts.push([t, t]);
  }
  let burst = -1;
  const burstText = document.getElementById('burst');
  function nextBurst() {
    if (!bursts.length) return;
    burst = (burst + 1) % bursts.length;
    const [t0, t1] = bursts[burst];
    const wide = Math.max(t1 - t0, tMax / 100, 10) * 1.2;
    v0 = (t0 + t1) / 2 - wide / 2; v1 = v0 + wide;
    burstText.textContent = 'burst ' + (burst + 1) + ' of ' + bursts.length + ': ' + fmt(t0) + ' to ' + fmt(t1);
    later();
  }
  function pan(px) { const d = px / scale(); v0 += d; v1 += d; later(); }
  svg.addEventListener('wheel', (e) => {
    const x = e.clientX - svg.getBoundingClientRect().left;
    if (x < LEFT) return; // over the names: scroll the page
    e.preventDefault();
    if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) pan(e.deltaX);
    else zoom(Math.exp(e.deltaY * 0.0015), tOf(x));
  }, { passive: false });
  let drag = null;
  svg.addEventListener('pointerdown', (e) => { drag = { x: e.clientX, moved: false }; svg.setPointerCapture(e.pointerId); });
  svg.addEventListener('pointerup', (e) => { if (drag && !drag.moved) pin(e); drag = null; });
  const tip = document.getElementById('tip');
  const lineBox = document.getElementById('line');
  function near(e) {
    const box = svg.getBoundingClientRect();
    const x = e.clientX - box.left, y = e.clientY - box.top;
    const lane = lanes.find((l) => y >= l.y && y < l.y + l.height);
    if (!lane || x < LEFT) return null;
    const msPerPx = 1 / scale();
    let best = null, bestD = 9;
    for (let k = lowerBound(lane.marks, tOf(x) - 8 * msPerPx); k < lane.marks.length; k++) {
      const m = lane.marks[k];
      if (m.t > tOf(x) + 8 * msPerPx) break;
      const d = Math.hypot(xOf(m.t) - x, (lane.y + ROW_Y[m.row] - y) / 2);
      if (d < bestD) { best = m; bestD = d; }
    }
    if (best) return { text: best.entry ? entryText(best.entry) + (best.lost ? '  (lost: the service is down)' : '') : textOf(lines[best.i]), x: xOf(best.t), y: lane.y + ROW_Y[best.row] };
    const t = tOf(x);
    const rule = vrules.find((r) => Math.abs(xOf(r.t) - x) < 4);
    if (rule) return { text: rule.mark ? textOf(lines[rule.mark.i]) : entryText(rule.entry), x: xOf(rule.t), y };
    const over = spans.filter((s) => (s.lane === lane || !s.lane) && t >= s.t0 && t <= s.t1).map((s) => s.text);
    return over.length ? { text: over.join('\n') } : null;
  }
  function pin(e) { const found = near(e); if (found) lineBox.textContent = found.text; }
  svg.addEventListener('pointermove', (e) => {
    if (drag && e.buttons) {
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 2) drag.moved = true;
      if (drag.moved) { pan(-dx); drag.x = e.clientX; }
      return;
    }
    const found = near(e);
    const hover = document.getElementById('hover');
    if (!found) { tip.hidden = true; if (hover) hover.setAttribute('d', ''); return; }
    tip.textContent = found.text;
    tip.hidden = false;
    tip.style.left = Math.min(e.pageX + 14, document.documentElement.scrollWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = (e.pageY + 16) + 'px';
    if (hover) hover.setAttribute('d', found.y === undefined ? '' : 'M' + (found.x - 7) + ' ' + (found.y - 7) + 'h14v14h-14z');
  });
  svg.addEventListener('pointerleave', () => { tip.hidden = true; });
  document.getElementById('controls').addEventListener('click', (e) => {
    const how = e.target.getAttribute && e.target.getAttribute('data-zoom');
    if (how === 'in') zoom(0.5); else if (how === 'out') zoom(2); else if (how === 'fit') fit(); else if (how === 'burst') nextBurst();
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === '+' || e.key === '=') zoom(0.5); else if (e.key === '-') zoom(2); else if (e.key === '0') fit();
    else if (e.key === 'b') nextBurst();
    else if (e.key === 'ArrowLeft') pan(-100); else if (e.key === 'ArrowRight') pan(100);
  });
  window.addEventListener('resize', later);

  // --- the text around the picture -----------------------------------------
  function legend() {
    const item = (svgText, text) => '<span class="item"><svg width="26" height="16">' + svgText + '</svg><span>' + text + '</span></span>';
    return [
      item('<rect class="s run r-done" x="1" y="3" width="24" height="10"/>', 'run'),
      item('<rect class="s wait durable" x="1" y="3" width="24" height="10"/>', '<code>after</code> wait, durable'),
      item('<rect class="s wait volatile" x="1" y="3" width="24" height="10"/>', 'wait, not durable'),
      item('<rect class="s window debounce" x="1" y="2" width="24" height="12"/>', 'debounce'),
      item('<rect class="s window hold" x="1" y="2" width="24" height="12"/>', '<code>for</code> hold'),
      item('<path class="m k-action" d="M13 1V15"/>', 'action'),
      item('<path class="m k-action-failed" d="M9 4l8 8m0 -8l-8 8"/>', 'failed'),
      item('<path class="m k-run-end r-cancelled" d="M9 4l8 8m0 -8l-8 8"/>', 'cancelled'),
      item('<path class="m k-trigger-refused" d="M9 4l8 8m0 -8l-8 8"/>', 'refused'),
      item('<path class="m k-guarded" d="M8 2h10v5q0 5 -5 8q-5 -3 -5 -8z"/>', 'guarded'),
      item('<rect class="s run r-limited" x="1" y="3" width="24" height="10"/>', 'limited'),
      item('<rect class="s tripped" x="1" y="0" width="24" height="16"/>', 'tripped'),
      item('<circle class="m k-non-fire" cx="13" cy="8" r="3.5"/>', 'not started'),
      item('<path class="m k-action fin" d="M13 1V15"/><path class="m k-finally-start fin" d="M20 14v-13h5l-2 3l2 3h-5"/>', '<code>finally</code>'),
      item('<rect class="m other" x="9" y="4" width="8" height="8"/>', 'other line'),
      item('<rect class="s down" x="1" y="0" width="24" height="16"/>', 'service down'),
      item('<path class="vr k-reload" d="M13 0V16"/>', 'reload'),
      item('<path class="vr k-clock" d="M13 0V16"/>', 'clock jump'),
    ].join('');
  }
  document.getElementById('legend').innerHTML = legend();
  document.getElementById('summary').textContent = lines.length + ' output lines, ' + (lanes.length - 1) + ' rules drawn, ' + fmt(0) + ' to ' + fmt(tMax);
  if (data.quiet.length) document.getElementById('quiet').textContent = 'Rules without a line (no lane): ' + data.quiet.join(', ');
  if (data.test) {
    const box = document.getElementById('test');
    box.hidden = false;
    box.innerHTML = '<strong>FAIL</strong> ' + esc(data.test.file) + '<br>' + esc(data.test.expectation) + '<br>' + esc(data.test.problem) + '; the ringed marks are the lines in question';
    lineBox.textContent = data.test.marked.map((i) => '> ' + textOf(lines[i])).join('\n') || lineBox.textContent;
  }

  render();
  document.body.dataset.renderMs = (performance.now() - started).toFixed(1);
  // Marks drawn, by kind: the `M`s of each kind's paths.
  const count = (selector, attr) => {
    const counts = {};
    for (const el of svg.querySelectorAll(selector)) {
      const k = el.getAttribute(attr);
      counts[k] = (counts[k] || 0) + (el.getAttribute('d').match(/M/g) || []).length;
    }
    return JSON.stringify(counts);
  };
  document.body.dataset.marks = count('[data-kind]', 'data-kind');
  document.body.dataset.entries = count('[data-entry]', 'data-entry');
  document.body.dataset.expected = svg.querySelectorAll('.ring').length && (svg.querySelector('.ring').getAttribute('d').match(/M/g) || []).length;
  if (location.hash === '#probe') probe();
  if (location.hash === '#layout') layout();
  if (location.hash === '#bench') {
    // Zoom in step by step around the middle, then back: the time of one drawing.
    const t0 = performance.now();
    for (let k = 0; k < 20; k++) { zoom(k < 10 ? 0.6 : 1 / 0.6); render(); }
    document.body.dataset.zoomMs = ((performance.now() - t0) / 20).toFixed(1);
  }
  // `#layout` (the CI test): every label drawn, at the fit and in each
  // burst the "bursts" button zooms to, and whether it stays inside its
  // lane and the picture; then each burst with the view it got.
  function layout() {
    const labels = [], seen = [];
    const note = () => {
      const w = width();
      for (const el of svg.querySelectorAll('text.l')) {
        const box = el.getBBox(), base = +el.getAttribute('y');
        const lane = lanes.find((l) => base >= l.y && base < l.y + l.height);
        const inside = !!lane && box.y >= lane.y && box.y + box.height <= lane.y + lane.height && box.x >= LEFT && box.x + box.width <= w;
        labels.push({ text: el.textContent, fin: el.classList.contains('fin'), inside });
      }
    };
    note();
    const button = document.querySelector('[data-zoom="burst"]');
    for (let k = 0; k < bursts.length; k++) {
      button.click();
      render();
      note();
      seen.push([bursts[k][0], bursts[k][1], v0, v1]);
    }
    document.body.dataset.labels = JSON.stringify(labels);
    document.body.dataset.bursts = JSON.stringify(seen);
  }
  // `#probe` (the CI test): point at the first action and zoom in there,
  // as a person would, and write down what the page showed.
  function probe() {
    const m = marks.find((mark) => mark.kind === 'action' && !mark.entry);
    if (!m) return;
    const box = svg.getBoundingClientRect();
    const at = { clientX: box.left + xOf(m.t), clientY: box.top + m.lane.y + ROW_Y[m.row], bubbles: true, cancelable: true };
    svg.dispatchEvent(new PointerEvent('pointermove', at));
    document.body.dataset.probeLine = m.i;
    document.body.dataset.probeTip = tip.textContent;
    const before = v1 - v0;
    svg.dispatchEvent(new WheelEvent('wheel', Object.assign({ deltaY: -400 }, at)));
    render();
    document.body.dataset.probeZoom = (before / (v1 - v0)).toFixed(2);
  }
})();
