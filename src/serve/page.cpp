// The page `attnmt serve` answers at /: a sentence box, the models to ask, and per model its translation, n-best list,
// attention heat map (hover: source word, target word, weight; words or pieces for a SentencePiece run) and test BLEU
// by source length. /?src=...&beam=..&nbest=..&ref=..&models=100,101 fills the form and translates on load. Plain HTML with its script inline: nothing is fetched but the server's own API.
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
</style></head><body>
<h1>attnmt serve</h1>
<div class="muted">Type a sentence, choose the models, and see where each one looks. The API: POST /translator/translate (docs/serve.md).</div>
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
function heatMap(card, att) {
  const t = el("table", {class: "map"});
  const head = el("thead"), hr = el("tr"); hr.appendChild(el("th"));
  att.src.forEach((w) => hr.appendChild(el("th", {}, w))); head.appendChild(hr); t.appendChild(head);
  const body = el("tbody");
  const hover = card.querySelector(".hover");
  att.weights.forEach((row, j) => {
    const r = el("tr"); r.appendChild(el("th", {}, att.tgt[j]));
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
  const cap = el("caption", {class: "muted"}, "rows: the translation, token by token \u2193 \u00b7 columns: the source \u2192 \u00b7 shade: attention weight ");
  const scale = el("span", {class: "scale"});
  scale.appendChild(el("span", {}, "0 "));
  scale.appendChild(el("span", {class: "ramp"}));
  scale.appendChild(el("span", {}, " 1"));
  cap.appendChild(scale);
  t.insertBefore(cap, t.firstChild);
  return t;
}
function showMap(card, hyp, pieces) {
  const box = card.querySelector(".mapbox");
  box.textContent = "";
  const att = pieces && hyp.attention_pieces ? hyp.attention_pieces : hyp.attention;
  if (att) box.appendChild(heatMap(card, att));
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
      r.addEventListener("change", () => showMap(card, best, v === "pieces"));
      lab.appendChild(r); lab.appendChild(document.createTextNode(" " + label + " ")); sw.appendChild(lab);
    }
    res.appendChild(sw);
  }
  res.appendChild(el("div", {class: "hover"}));
  res.appendChild(el("div", {class: "mapbox"}));
  if (!best.attention && m.has_attention === false) res.appendChild(el("div", {class: "muted"}, "attention none: the decoder reads one fixed context vector, so there is no map"));
  showMap(card, best, false);
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
  if (q.get("src")) { $("src").value = q.get("src"); await translate(); document.body.setAttribute("data-done", "1"); }
}
init();
</script></body></html>
)HTML";
  return page;
}

}  // namespace attnmt
