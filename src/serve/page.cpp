// The page `attnmt serve` answers at /: a sentence box, the models to ask, and per model its translation, n-best list,
// attention heat map (hover: source word, target word, weight; words or pieces for a SentencePiece run) and test BLEU
// by source length; a click on a row of a map explains that step (POST /translator/explain: scores, scaling, softmax,
// weighted sum; a self-attention model's layers, heads and causal mask). /?src=...&beam=..&nbest=..&ref=..&models=100,101
// fills the form and translates on load (&explain=STEP&part=..&layer=.. opens an explanation too). Plain HTML with its
// script inline: nothing is fetched but the server's own API. The page itself is page.html beside this file, an HTML
// file that editors and checkers read as one; the build wraps it in a raw string literal (CMakeLists.txt).
#include "serve/http.h"

namespace attnmt {

const std::string& serve_page() {
  static const std::string page =
#include "serve/page_html.inc"
      ;
  return page;
}

}  // namespace attnmt
