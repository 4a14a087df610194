// The page `attnmt serve` answers at /: a sentence box, the models to ask, and per model its translation, n-best list,
// attention heat map (hover: source word, target word, weight; words or pieces for a SentencePiece run) and test BLEU
// by source length; a click on a row of a map explains that step (POST /translator/explain: scores, scaling, softmax,
// weighted sum; a self-attention model's layers, heads and causal mask). /?src=...&beam=..&nbest=..&ref=..&models=100,101
// fills the form and translates on load (&explain=STEP&part=..&layer=.. opens an explanation too). Plain HTML with its
// script inline: nothing is fetched but the server's own API.
#include "serve/http.h"

namespace attnmt {

const std::string& serve_page() {
  static const std::string page = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>attnmt serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.4em;margin:0 0 .3em} h2{font-size:1.1em;margin:.2em 0}
textarea{width:100%;font-size:1.05em;padding:.4em;box-sizing:border-box}
.row{display:flex;gap:1em;flex-wrap:wrap;align-items:center;margin:.5em 0}
.cards{display:flex;gap:1em;flex-wrap:wrap;align-items:flex-start}
.card{border:1px solid #ccc;border-radius:6px;padding:.7em;flex:1 1 420px;min-width:320px;overflow-x:auto}
.tgt{font-size:1.15em;margin:.4em 0;font-weight:600} .muted{color:#666;font-size:.88em}
.error{color:#b00020;font-weight:600}
table.map{border-collapse:collapse;margin:.5em 0}
table.map td{width:18px;height:18px;border:1px solid #eee;padding:0}
table.map caption{caption-side:top;text-align:left;font-size:.85em;padding-bottom:.3em}
.scale .ramp{display:inline-block;width:80px;height:10px;vertical-align:middle;background:linear-gradient(to right,rgb(255,255,255),rgb(0,0,255));border:1px solid #ccc}
table.map th{font-weight:normal;font-size:.85em;padding:0 .3em;white-space:nowrap}
table.map thead th{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;height:auto;padding:.3em 0}
table.map tbody th{text-align:right}
.hover{min-height:1.3em;font-family:monospace}
table.len{border-collapse:collapse;font-size:.85em} table.len td,table.len th{padding:1px 6px;text-align:right}
.bar{display:inline-block;height:10px;background:#4a7bd0}
ol.nbest{margin:.2em 0;padding-left:1.6em} ol.nbest li span{color:#666;font-size:.85em}
table.map tbody tr.clickable{cursor:pointer} table.map tbody tr.chosen th{font-weight:700;text-decoration:underline}
.explain{margin-top:.5em;border-top:1px dashed #ccc;padding-top:.4em;font-size:.9em} .xhead{font-weight:600}
table.lookup{border-collapse:collapse;font-size:.9em} table.lookup td,table.lookup th{padding:1px 6px;text-align:right}
table.lookup td:first-child,table.lookup th:first-child{text-align:left} table.lookup tr.masked{color:#999}
.wbar{display:inline-block;height:9px;background:#4a7bd0;vertical-align:middle}
</style></head><body>
<h1>attnmt serve</h1>
<div class="muted">Type a sentence, choose the models, and see where each one looks; click a row of a map to see how that step decided (scores, scaling, softmax, weighted sum). The API: POST /translator/translate and /translator/explain (docs/serve.md).</div>
<textarea id="src" rows="2" placeholder="a sentence in the source language"></textarea>
<div class="row">
 <span id="models"></span>
 <label>beam <select id="beam"><option>1</option><option selected>5</option><option>10</option></select></label>
 <label>n-best <select id="nbest"><option selected>1</option><option>3</option><option>5</option></select></label>
 <input id="ref" size="40" placeholder="reference (optional: sentence BLEU)">
 <button id="go">Translate</button>
</div>
<div id="status" class="muted"></div>
<div id="cards" class="cards"></div>
<script>
"use strict";
let MODELS = [];
const $ = (id) => document.getElementById(id);
// serve --token: the page's URL carries it after #token= (never sent to the server but in this header).
function auth() {
  const t = new URLSearchParams(location.hash.slice(1)).get("token");
  return t ? {"Authorization": "Bearer " + t} : {};
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in (attrs || {})) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function lengthTable(test) {
  const t = el("table", {class: "len"});
  const h = el("tr"); ["src words", "count", "test BLEU", ""].forEach((x) => h.appendChild(el("th", {}, x))); t.appendChild(h);
  for (const b of test.by_length) {
    const r = el("tr");
    r.appendChild(el("td", {}, b.min + "-" + (b.max < 0 ? "" : b.max)));
    r.appendChild(el("td", {}, String(b.count)));
    r.appendChild(el("td", {}, b.bleu.toFixed(1)));
    const c = el("td"); c.appendChild(el("span", {class: "bar", style: "width:" + Math.round(b.bleu) + "px"})); r.appendChild(c);
    t.appendChild(r);
  }
  return t;
}
// onRow(j): what a click on row j does (null: rows are not clickable); axes: what rows and columns are.
function heatMap(card, att, onRow, axes) {
  const t = el("table", {class: "map"});
  const head = el("thead"), hr = el("tr"); hr.appendChild(el("th"));
  att.src.forEach((w) => hr.appendChild(el("th", {}, w))); head.appendChild(hr); t.appendChild(head);
  const body = el("tbody");
  const hover = card.querySelector(".hover");
  att.weights.forEach((row, j) => {
    const r = el("tr"); r.appendChild(el("th", {}, att.tgt[j]));
    if (onRow) {
      r.classList.add("clickable");
      r.title = "click: how step " + (j + 1) + " decided";
      r.addEventListener("click", () => { t.querySelectorAll("tr.chosen").forEach((x) => x.classList.remove("chosen")); r.classList.add("chosen"); onRow(j); });
    }
    row.forEach((w, i) => {
      const shade = Math.round(255 * (1 - Math.min(1, w)));
      const c = el("td", {class: "w", style: "background:rgb(" + shade + "," + shade + ",255)",
                          "data-src": att.src[i], "data-tgt": att.tgt[j], "data-w": w.toFixed(3),
                          title: att.src[i] + " \u2192 " + att.tgt[j] + ": " + w.toFixed(3)});
      c.addEventListener("mouseover", () => { hover.textContent = "source \u201c" + att.src[i] + "\u201d, target \u201c" + att.tgt[j] + "\u201d: weight " + w.toFixed(3); });
      r.appendChild(c);
    });
    body.appendChild(r);
  });
  t.appendChild(body);
  // Axis titles and the colour scale: what a row, a column and a shade mean.
  const cap = el("caption", {class: "muted"}, (axes || "rows: the translation, token by token \u2193 \u00b7 columns: the source \u2192") + " \u00b7 shade: attention weight ");
  const scale = el("span", {class: "scale"});
  scale.appendChild(el("span", {}, "0 "));
  scale.appendChild(el("span", {class: "ramp"}));
  scale.appendChild(el("span", {}, " 1"));
  cap.appendChild(scale);
  t.insertBefore(cap, t.firstChild);
  return t;
}
// The map of words, or of pieces for a SentencePiece run; a step is explained over the model's own tokens, so the rows
// of a word map of a subword run are not clickable (its pieces' are).
function showMap(m, card, hyp, pieces) {
  const box = card.querySelector(".mapbox");
  box.textContent = "";
  const att = pieces && hyp.attention_pieces ? hyp.attention_pieces : hyp.attention;
  const tokens = pieces || !hyp.attention_pieces;
  // A model with layers or heads says which attention the map is (serve's /models "map").
  const axes = (m.map ? m.map + " \u00b7 " : "") + "rows: the translation, token by token \u2193 \u00b7 columns: the source \u2192";
  if (att) box.appendChild(heatMap(card, att, tokens ? (j) => explainStep(m, card, j + 1, {part: "cross"}) : null, axes));
  if (att && !tokens) box.appendChild(el("div", {class: "muted"}, "choose pieces to explain a step (the model decides piece by piece)"));
}
async function explainStep(m, card, step, opts) {
  const box = card.querySelector(".explain");
  const body = {src: $("src").value.trim(), id: m.model_id, beam_size: parseInt($("beam").value), step: step, part: opts.part};
  if (opts.layer) body.layer = opts.layer;
  box.textContent = "explaining step " + step + "\u2026";
  try {
    const r = await fetch("translator/explain", {method: "POST", headers: Object.assign({"Content-Type": "application/json"}, auth()), body: JSON.stringify(body)});
    const e = await r.json();
    box.textContent = "";
    if (r.status !== 200) { box.appendChild(el("div", {class: "error"}, "HTTP " + r.status + ": " + (e.error || ""))); return; }
    renderExplain(m, card, e, step);
  } catch (err) { box.textContent = ""; box.appendChild(el("div", {class: "error"}, String(err))); }
}
function selectOf(cls, options, chosen, onChange) {
  const s = el("select", {class: cls});
  for (const [v, label] of options) { const o = el("option", {value: String(v)}, label); if (String(v) === String(chosen)) o.selected = true; s.appendChild(o); }
  s.addEventListener("change", () => onChange(s.value));
  return s;
}
// One step as the lesson computes it: the controls (a self-attention model: which attention, layer, head), the
// formula, and per key token its score, the scaled score and the weight, then the context.
function renderExplain(m, card, e, step) {
  const box = card.querySelector(".explain");
  const sa = m.self_attention || {};
  const ctl = el("div", {class: "row muted"});
  if (sa.encoder || sa.decoder) {
    const parts = [["cross", "cross-attention"]];
    if (sa.encoder) parts.push(["encoder", "encoder self-attention"]);
    if (sa.decoder) parts.push(["decoder", "decoder self-attention"]);
    ctl.appendChild(selectOf("part", parts, e.part, (v) => explainStep(m, card, v === "encoder" ? 1 : (e.part === "encoder" ? 1 : e.step), {part: v})));
    if (e.layers > 0) {
      const layers = []; for (let l = 1; l <= e.layers; ++l) layers.push([l, "layer " + l + " of " + e.layers]);
      ctl.appendChild(selectOf("layer", layers, e.layer, (v) => explainStep(m, card, e.step, {part: e.part, layer: parseInt(v)})));
    }
    if (e.part === "encoder")
      ctl.appendChild(selectOf("position", e.source.map((w, i) => [i + 1, "source " + (i + 1) + ": " + w]), e.step,
                               (v) => explainStep(m, card, parseInt(v), {part: "encoder", layer: e.layer})));
  }
  const table = el("div");
  if (e.heads.length > 1) {
    const heads = e.heads.map((h, i) => [i, "head " + (i + 1) + " of " + e.heads.length]);
    ctl.appendChild(selectOf("head", heads, 0, (v) => lookupTable(table, e, parseInt(v))));
  }
  const what = e.part === "encoder" ? "source position " + e.step + " (\u201c" + e.query_token + "\u201d)"
             : "step " + e.step + (e.part === "decoder" ? " at \u201c" + e.query_token + "\u201d" : "") + ", which produced \u201c" + e.produced + "\u201d";
  box.appendChild(el("div", {class: "xhead"}, what + ": " + e.mechanism + (e.layers > 0 ? ", layer " + e.layer : "")));
  box.appendChild(ctl);
  box.appendChild(el("div", {}, "query: " + e.query_is));
  box.appendChild(el("div", {}, e.score));
  box.appendChild(el("div", {class: "muted"}, e.scaling));
  box.appendChild(table);
  lookupTable(table, e, 0);
}
function lookupTable(box, e, h) {
  box.textContent = "";
  const l = e.heads[h];
  const t = el("table", {class: "lookup"});
  const hr = el("tr");
  for (const c of ["key token", "score", "\u00d7 " + e.scale.toFixed(3), "weight", ""]) hr.appendChild(el("th", {}, c));
  t.appendChild(hr);
  l.weights.forEach((w, j) => {
    const masked = e.masked[j];
    const r = el("tr", masked ? {class: "masked", title: "hidden by the causal mask: a position sees only itself and earlier ones"} : {});
    r.appendChild(el("td", {}, e.keys[j]));
    r.appendChild(el("td", {}, masked ? "masked" : l.scores[j].toFixed(3)));
    r.appendChild(el("td", {}, masked ? "\u2212\u221e" : l.scaled[j].toFixed(3)));
    r.appendChild(el("td", {}, w.toFixed(3)));
    const bar = el("td"); bar.appendChild(el("span", {class: "wbar", style: "width:" + Math.round(80 * w) + "px"})); r.appendChild(bar);
    t.appendChild(r);
  });
  box.appendChild(t);
  if (l.map && l.map.length > 1) {  // the layer's whole map for this head (the decoder's: the causal triangle); a row click explains it
    const part = e.part, layer = e.layer, card = box.closest(".card");
    const m = MODELS.find((x) => "out-" + x.model_id === card.id);
    const map = heatMap(card, {src: e.keys, tgt: e.rows, weights: l.map}, (j) => explainStep(m, card, j + 1, {part: part, layer: layer}),
                        "this head at every position (click a row) \u00b7 rows: queries \u2193 \u00b7 columns: keys \u2192");
    map.classList.add("layermap");
    const chosen = map.querySelectorAll("tbody tr")[e.step - 1];
    if (chosen) chosen.classList.add("chosen");
    box.appendChild(map);
  }
  const sum = l.weights.reduce((a, b) => a + b, 0);
  const norm = Math.sqrt(l.context.reduce((a, b) => a + b * b, 0));
  const top = l.weights.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 3).map(([w, j]) => e.keys[j] + " " + (100 * w).toFixed(1) + "%");
  box.appendChild(el("div", {class: "muted"}, "softmax: the weights sum to " + sum.toFixed(3) + "; context = \u03a3 weight \u00d7 value (norm " + norm.toFixed(3) +
                     "), most of it from " + top.join(", ") + (e.heads.length > 1 ? "; the heads' contexts joined and projected back: W_o [c_1; \u2026; c_" + e.heads.length + "]" : "") +
                     "; formed here from the weights and values, it differs from the forward pass's own by at most " + e.context_check.toExponential(1)));
}
function render(m, reply, status) {
  const card = $("out-" + m.model_id);
  card.querySelector(".result").textContent = "";
  const res = card.querySelector(".result");
  if (status !== 200) { res.appendChild(el("div", {class: "error"}, "HTTP " + status + ": " + (reply.error || ""))); return; }
  const best = reply[0][0];
  res.appendChild(el("div", {class: "tgt"}, best.tgt));
  let meta = "score " + best.pred_score.toFixed(3);
  if (best.bleu !== undefined) meta += ", sentence BLEU " + best.bleu.toFixed(1);
  if (best.align) meta += ", alignment " + best.align;
  const scoreDiv = el("div", {class: "muted score"}, meta);
  scoreDiv.title = "score: what the search ranked by: the translation's log-probability (" + best.logprob.toFixed(3) +
    ", <eos> included), with a beam above 1 divided by the length penalty ((5 + length) / 6)^alpha; 0 would be certainty, lower is less sure";
  res.appendChild(scoreDiv);
  if (reply.length > 1) {
    const ol = el("ol", {class: "nbest"});
    reply.forEach((rank) => { const li = el("li", {}, rank[0].tgt + " "); li.appendChild(el("span", {}, rank[0].pred_score.toFixed(3))); ol.appendChild(li); });
    res.appendChild(ol);
  }
  if (best.attention_pieces) {
    const sw = el("div", {class: "muted"});
    for (const [v, label] of [["words", "words"], ["pieces", "pieces"]]) {
      const lab = el("label"); const r = el("input", {type: "radio", name: "view-" + m.model_id, value: v});
      if (v === "words") r.checked = true;
      r.addEventListener("change", () => showMap(m, card, best, v === "pieces"));
      lab.appendChild(r); lab.appendChild(document.createTextNode(" " + label + " ")); sw.appendChild(lab);
    }
    res.appendChild(sw);
  }
  res.appendChild(el("div", {class: "hover"}));
  res.appendChild(el("div", {class: "mapbox"}));
  res.appendChild(el("div", {class: "explain"}));
  if (!best.attention && m.has_attention === false) res.appendChild(el("div", {class: "muted"}, "attention none: the decoder reads one fixed context vector, so there is no map"));
  showMap(m, card, best, false);
}
async function translate() {
  const src = $("src").value.trim();
  if (!src) { $("status").textContent = "type a sentence first"; return; }
  const chosen = MODELS.filter((m) => $("use-" + m.model_id).checked);
  const beam = parseInt($("beam").value), nbest = Math.min(parseInt($("nbest").value), beam);
  $("status").textContent = "translating with " + chosen.length + " model(s)\u2026";
  const t0 = performance.now();
  await Promise.all(MODELS.map(async (m) => {
    const card = $("out-" + m.model_id);
    card.style.display = chosen.includes(m) ? "" : "none";
    if (!chosen.includes(m)) return;
    const item = {src: src, id: m.model_id, beam_size: beam, n_best: nbest};
    if (m.has_attention) { item.attention = true; item.align = true; }
    if ($("ref").value.trim()) item.ref = $("ref").value.trim();
    try {
      const r = await fetch("translator/translate", {method: "POST", headers: Object.assign({"Content-Type": "application/json"}, auth()), body: JSON.stringify([item])});
      render(m, await r.json(), r.status);
    } catch (e) { render(m, {error: String(e)}, 0); }
  }));
  $("status").textContent = "done in " + Math.round(performance.now() - t0) + " ms";
}
async function init() {
  const r = await fetch("models", {headers: auth()});
  if (!r.ok) {  // 401: a server started with --token, and a URL without #token=
    const reply = await r.json().catch(() => ({}));
    $("status").textContent = "HTTP " + r.status + ": " + (reply.error || "") + (r.status === 401 ? " (open the address serve printed, with its #token=)" : "");
    return;
  }
  MODELS = await r.json();
  for (const m of MODELS) {
    const lab = el("label"); const cb = el("input", {type: "checkbox", id: "use-" + m.model_id}); cb.checked = true;
    lab.appendChild(cb); lab.appendChild(document.createTextNode(" " + m.name + " (" + m.attention + ") ")); $("models").appendChild(lab);
    const card = el("div", {class: "card", id: "out-" + m.model_id});
    card.appendChild(el("h2", {}, m.name + " \u2014 id " + m.model_id));
    card.appendChild(el("div", {class: "muted"}, m.model));
    card.appendChild(el("div", {class: "result"}));
    if (m.test) {
      const d = el("details"); d.open = true; d.appendChild(el("summary", {class: "muted"}, "test BLEU " + m.test.bleu.toFixed(2) + " (beam " + m.test.beam_size + "), by source length"));
      d.appendChild(lengthTable(m.test)); card.appendChild(d);
    }
    $("cards").appendChild(card);
  }
  $("go").addEventListener("click", translate);
  $("src").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); translate(); } });
  $("status").textContent = MODELS.length + " model(s) loaded";
  document.body.setAttribute("data-ready", "1");
  // A link can carry the sentence: /?src=...&beam=5&nbest=3&ref=...&models=100,101 translates it on load.
  const q = new URLSearchParams(location.search);
  if (q.get("models")) { const ids = q.get("models").split(","); for (const m of MODELS) $("use-" + m.model_id).checked = ids.includes(String(m.model_id)); }
  $("ref").value = q.get("ref") || "";
  for (const k of ["beam", "nbest"]) {  // any whole number the API takes, not only the menu's: added to the menu
    const v = q.get(k);
    if (!v) continue;
    if (!/^[1-9][0-9]{0,2}$/.test(v)) { $("status").textContent = k + "=" + v + " in the address is not a whole number from 1: ignored"; continue; }
    if (![...$(k).options].some((o) => o.value === v)) $(k).appendChild(el("option", {}, v));
    $(k).value = v;
  }
  if (q.get("src")) {
    $("src").value = q.get("src");
    await translate();
    // &explain=STEP[&part=cross|encoder|decoder&layer=L]: each chosen model's explanation of that step opens too.
    const step = parseInt(q.get("explain") || "");
    if (step > 0)
      await Promise.all(MODELS.filter((m) => m.has_attention && $("use-" + m.model_id).checked).map((m) =>
        explainStep(m, $("out-" + m.model_id), step, {part: q.get("part") || "cross", layer: parseInt(q.get("layer") || "0")})));
    document.body.setAttribute("data-done", "1");
  }
}
init();
</script></body></html>
)HTML";
  return page;
}

}  // namespace attnmt
