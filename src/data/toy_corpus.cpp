#include "data/toy_corpus.h"

#include <filesystem>
#include <random>
#include <set>
#include <unordered_set>

#include "common/errors.h"
#include "common/fs.h"
#include "common/random.h"

namespace attnmt {
namespace {

struct Noun {
  const char *en_sg, *en_pl, *fr_sg, *fr_pl;
  char gender;  // 'm' or 'f'
  bool animate;
};
struct Adj {
  const char *en, *m_sg, *f_sg, *m_pl, *f_pl;
};
struct Verb {
  const char *en_sg, *en_pl, *fr_sg, *fr_pl;
};
struct Word {
  const char *en, *fr;
};

// French nouns all start with a consonant sound, so no elision (l', qu') is needed anywhere.
const std::vector<Noun> kNouns = {
    {"boy", "boys", "garçon", "garçons", 'm', true},         {"girl", "girls", "fille", "filles", 'f', true},
    {"woman", "women", "femme", "femmes", 'f', true},        {"king", "kings", "roi", "rois", 'm', true},
    {"queen", "queens", "reine", "reines", 'f', true},       {"doctor", "doctors", "médecin", "médecins", 'm', true},
    {"teacher", "teachers", "professeur", "professeurs", 'm', true},
    {"neighbor", "neighbors", "voisin", "voisins", 'm', true}, {"soldier", "soldiers", "soldat", "soldats", 'm', true},
    {"farmer", "farmers", "fermier", "fermiers", 'm', true}, {"baker", "bakers", "boulanger", "boulangers", 'm', true},
    {"sailor", "sailors", "marin", "marins", 'm', true},     {"painter", "painters", "peintre", "peintres", 'm', true},
    {"singer", "singers", "chanteur", "chanteurs", 'm', true}, {"dancer", "dancers", "danseuse", "danseuses", 'f', true},
    {"sister", "sisters", "sœur", "sœurs", 'f', true},       {"brother", "brothers", "frère", "frères", 'm', true},
    {"mother", "mothers", "mère", "mères", 'f', true},       {"father", "fathers", "père", "pères", 'm', true},
    {"son", "sons", "fils", "fils", 'm', true},              {"cook", "cooks", "cuisinier", "cuisiniers", 'm', true},
    {"driver", "drivers", "chauffeur", "chauffeurs", 'm', true},
    {"cat", "cats", "chat", "chats", 'm', true},             {"dog", "dogs", "chien", "chiens", 'm', true},
    {"horse", "horses", "cheval", "chevaux", 'm', true},     {"cow", "cows", "vache", "vaches", 'f', true},
    {"mouse", "mice", "souris", "souris", 'f', true},        {"rabbit", "rabbits", "lapin", "lapins", 'm', true},
    {"fox", "foxes", "renard", "renards", 'm', true},        {"wolf", "wolves", "loup", "loups", 'm', true},
    {"duck", "ducks", "canard", "canards", 'm', true},       {"goat", "goats", "chèvre", "chèvres", 'f', true},
    {"pig", "pigs", "cochon", "cochons", 'm', true},         {"frog", "frogs", "grenouille", "grenouilles", 'f', true},
    {"snake", "snakes", "serpent", "serpents", 'm', true},   {"lion", "lions", "lion", "lions", 'm', true},
    {"tiger", "tigers", "tigre", "tigres", 'm', true},       {"monkey", "monkeys", "singe", "singes", 'm', true},
    {"table", "tables", "table", "tables", 'f', false},      {"chair", "chairs", "chaise", "chaises", 'f', false},
    {"book", "books", "livre", "livres", 'm', false},        {"letter", "letters", "lettre", "lettres", 'f', false},
    {"car", "cars", "voiture", "voitures", 'f', false},      {"house", "houses", "maison", "maisons", 'f', false},
    {"garden", "gardens", "jardin", "jardins", 'm', false},  {"flower", "flowers", "fleur", "fleurs", 'f', false},
    {"box", "boxes", "boîte", "boîtes", 'f', false},         {"ball", "balls", "balle", "balles", 'f', false},
    {"bag", "bags", "sac", "sacs", 'm', false},              {"hat", "hats", "chapeau", "chapeaux", 'm', false},
    {"bed", "beds", "lit", "lits", 'm', false},              {"door", "doors", "porte", "portes", 'f', false},
    {"window", "windows", "fenêtre", "fenêtres", 'f', false}, {"road", "roads", "route", "routes", 'f', false},
    {"river", "rivers", "rivière", "rivières", 'f', false},  {"bridge", "bridges", "pont", "ponts", 'm', false},
    {"boat", "boats", "bateau", "bateaux", 'm', false},      {"train", "trains", "train", "trains", 'm', false},
    {"bicycle", "bicycles", "vélo", "vélos", 'm', false},    {"cake", "cakes", "gâteau", "gâteaux", 'm', false},
    {"bottle", "bottles", "bouteille", "bouteilles", 'f', false}, {"cup", "cups", "tasse", "tasses", 'f', false},
    {"key", "keys", "clé", "clés", 'f', false},              {"picture", "pictures", "tableau", "tableaux", 'm', false},
    {"song", "songs", "chanson", "chansons", 'f', false},    {"wall", "walls", "mur", "murs", 'm', false},
    {"shop", "shops", "magasin", "magasins", 'm', false},    {"city", "cities", "ville", "villes", 'f', false},
    {"village", "villages", "village", "villages", 'm', false}, {"forest", "forests", "forêt", "forêts", 'f', false},
    {"field", "fields", "champ", "champs", 'm', false},      {"mountain", "mountains", "montagne", "montagnes", 'f', false},
    {"street", "streets", "rue", "rues", 'f', false},        {"kitchen", "kitchens", "cuisine", "cuisines", 'f', false},
    {"lamp", "lamps", "lampe", "lampes", 'f', false},        {"pen", "pens", "stylo", "stylos", 'm', false},
    {"newspaper", "newspapers", "journal", "journaux", 'm', false},
    {"basket", "baskets", "panier", "paniers", 'm', false},  {"coat", "coats", "manteau", "manteaux", 'm', false},
    {"shoe", "shoes", "chaussure", "chaussures", 'f', false}, {"glass", "glasses", "verre", "verres", 'm', false},
    {"stone", "stones", "pierre", "pierres", 'f', false},
};

// Adjectives that follow the noun in French: these make the crossing alignments.
const std::vector<Adj> kPostAdjs = {
    {"black", "noir", "noire", "noirs", "noires"},         {"white", "blanc", "blanche", "blancs", "blanches"},
    {"red", "rouge", "rouge", "rouges", "rouges"},         {"green", "vert", "verte", "verts", "vertes"},
    {"blue", "bleu", "bleue", "bleus", "bleues"},          {"yellow", "jaune", "jaune", "jaunes", "jaunes"},
    {"grey", "gris", "grise", "gris", "grises"},           {"brown", "brun", "brune", "bruns", "brunes"},
    {"happy", "heureux", "heureuse", "heureux", "heureuses"}, {"sad", "triste", "triste", "tristes", "tristes"},
    {"tired", "fatigué", "fatiguée", "fatigués", "fatiguées"}, {"sick", "malade", "malade", "malades", "malades"},
    {"angry", "fâché", "fâchée", "fâchés", "fâchées"},     {"strong", "fort", "forte", "forts", "fortes"},
    {"rich", "riche", "riche", "riches", "riches"},        {"heavy", "lourd", "lourde", "lourds", "lourdes"},
    {"round", "rond", "ronde", "ronds", "rondes"},         {"warm", "chaud", "chaude", "chauds", "chaudes"},
    {"cold", "froid", "froide", "froids", "froides"},      {"clean", "propre", "propre", "propres", "propres"},
    {"dirty", "sale", "sale", "sales", "sales"},           {"empty", "vide", "vide", "vides", "vides"},
    {"full", "plein", "pleine", "pleins", "pleines"},      {"quiet", "calme", "calme", "calmes", "calmes"},
    {"noisy", "bruyant", "bruyante", "bruyants", "bruyantes"}, {"famous", "célèbre", "célèbre", "célèbres", "célèbres"},
    {"strange", "étrange", "étrange", "étranges", "étranges"}, {"broken", "cassé", "cassée", "cassés", "cassées"},
    {"curious", "curieux", "curieuse", "curieux", "curieuses"},
    {"lazy", "paresseux", "paresseuse", "paresseux", "paresseuses"},
    {"brave", "courageux", "courageuse", "courageux", "courageuses"},
};
// Adjectives that precede the noun in French, as in English.
const std::vector<Adj> kPreAdjs = {
    {"small", "petit", "petite", "petits", "petites"}, {"big", "grand", "grande", "grands", "grandes"},
    {"young", "jeune", "jeune", "jeunes", "jeunes"},   {"old", "vieux", "vieille", "vieux", "vieilles"},
    {"pretty", "joli", "jolie", "jolis", "jolies"},    {"good", "bon", "bonne", "bons", "bonnes"},
    {"bad", "mauvais", "mauvaise", "mauvais", "mauvaises"}, {"beautiful", "beau", "belle", "beaux", "belles"},
};
const std::vector<Verb> kTransVerbs = {
    {"sees", "see", "voit", "voient"},           {"likes", "like", "aime", "aiment"},
    {"follows", "follow", "suit", "suivent"},    {"finds", "find", "trouve", "trouvent"},
    {"watches", "watch", "regarde", "regardent"}, {"helps", "help", "aide", "aident"},
    {"calls", "call", "appelle", "appellent"},   {"knows", "know", "connaît", "connaissent"},
    {"carries", "carry", "porte", "portent"},    {"paints", "paint", "peint", "peignent"},
    {"draws", "draw", "dessine", "dessinent"},   {"pushes", "push", "pousse", "poussent"},
    {"pulls", "pull", "tire", "tirent"},         {"visits", "visit", "visite", "visitent"},
    {"chases", "chase", "chasse", "chassent"},   {"hides", "hide", "cache", "cachent"},
    {"breaks", "break", "casse", "cassent"},     {"wants", "want", "veut", "veulent"},
    {"buys", "buy", "achète", "achètent"},       {"sells", "sell", "vend", "vendent"},
    {"brings", "bring", "apporte", "apportent"}, {"cleans", "clean", "nettoie", "nettoient"},
    {"opens", "open", "ouvre", "ouvrent"},       {"closes", "close", "ferme", "ferment"},
};
const std::vector<Verb> kIntransVerbs = {
    {"sleeps", "sleep", "dort", "dorment"},   {"sings", "sing", "chante", "chantent"},
    {"runs", "run", "court", "courent"},      {"walks", "walk", "marche", "marchent"},
    {"laughs", "laugh", "rit", "rient"},      {"waits", "wait", "attend", "attendent"},
    {"works", "work", "travaille", "travaillent"}, {"dances", "dance", "danse", "dansent"},
    {"swims", "swim", "nage", "nagent"},      {"cries", "cry", "pleure", "pleurent"},
    {"eats", "eat", "mange", "mangent"},      {"plays", "play", "joue", "jouent"},
};
// English adverbs stand before the verb; French ones after it (another local reordering).
const std::vector<Word> kAdverbs = {{"often", "souvent"}, {"always", "toujours"}, {"sometimes", "parfois"},
                                    {"rarely", "rarement"}, {"already", "déjà"}, {"also", "aussi"}};
// Simple prepositions (one French word).
const std::vector<Word> kPreps = {{"with", "avec"},     {"under", "sous"},   {"behind", "derrière"}, {"on", "sur"},
                                  {"in", "dans"},       {"without", "sans"}, {"for", "pour"},        {"toward", "vers"},
                                  {"against", "contre"}, {"after", "après"}};

enum class Det { kThe, kA, kThis, kMy };

struct Phrase {
  std::vector<std::string> en, fr;
  Alignment links;  // (en index, fr index)

  // Appends q with its English and French tokens after ours.
  void append(const Phrase& q) {
    int eo = static_cast<int>(en.size()), fo = static_cast<int>(fr.size());
    en.insert(en.end(), q.en.begin(), q.en.end());
    fr.insert(fr.end(), q.fr.begin(), q.fr.end());
    for (auto [i, j] : q.links) links.emplace_back(i + eo, j + fo);
  }
};

// A unit: some English words aligned to some French words (all-to-all).
Phrase unit(std::vector<std::string> en, std::vector<std::string> fr) {
  Phrase p;
  p.en = std::move(en);
  p.fr = std::move(fr);
  for (size_t i = 0; i < p.en.size(); ++i)
    for (size_t j = 0; j < p.fr.size(); ++j) p.links.emplace_back(static_cast<int>(i), static_cast<int>(j));
  return p;
}

// Concatenates parts in English order, and their French sides in the order fr_order.
Phrase arrange(const std::vector<Phrase>& parts, const std::vector<size_t>& fr_order) {
  Phrase out;
  std::vector<int> en_off(parts.size()), fr_off(parts.size());
  int eo = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    en_off[k] = eo;
    eo += static_cast<int>(parts[k].en.size());
    out.en.insert(out.en.end(), parts[k].en.begin(), parts[k].en.end());
  }
  int fo = 0;
  for (size_t k : fr_order) {
    fr_off[k] = fo;
    fo += static_cast<int>(parts[k].fr.size());
    out.fr.insert(out.fr.end(), parts[k].fr.begin(), parts[k].fr.end());
  }
  for (size_t k = 0; k < parts.size(); ++k)
    for (auto [i, j] : parts[k].links) out.links.emplace_back(i + en_off[k], j + fr_off[k]);
  return out;
}

struct NP {
  Phrase p;
  bool plural = false;
  char gender = 'm';
  bool human = false;
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  // One sentence whose English side (with the final period) has a length in [lo, hi].
  Phrase sentence(int lo, int hi) {
    for (;;) {
      double c = uniform();
      Phrase s = clause(c);
      while (static_cast<int>(s.en.size()) + 1 < lo) {
        s.append(connector());
        s.append(clause(uniform()));
      }
      s.append(unit({"."}, {"."}));
      int n = static_cast<int>(s.en.size());
      if (n >= lo && n <= hi) return s;
    }
  }

 private:
  double uniform() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }
  bool chance(double p) { return uniform() < p; }
  size_t pick(size_t n) { return static_cast<size_t>(rng_() % n); }

  Phrase connector() {
    switch (pick(4)) {
      case 0: return unit({"and"}, {"et"});
      case 1: {
        Phrase p = unit({","}, {","});
        p.append(unit({"but"}, {"mais"}));
        return p;
      }
      case 2: return unit({"while"}, {"pendant", "que"});
      default: return unit({"because"}, {"parce", "que"});
    }
  }

  Phrase det(Det d, bool plural, char gender) {
    switch (d) {
      case Det::kThe: return unit({"the"}, {plural ? "les" : gender == 'm' ? "le" : "la"});
      case Det::kA: return unit({plural ? "some" : "a"}, {plural ? "des" : gender == 'm' ? "un" : "une"});
      case Det::kThis: return unit({plural ? "these" : "this"}, {plural ? "ces" : gender == 'm' ? "ce" : "cette"});
      default: return unit({"my"}, {plural ? "mes" : gender == 'm' ? "mon" : "ma"});
    }
  }

  static const char* adj_form(const Adj& a, bool plural, char gender) {
    if (gender == 'm') return plural ? a.m_pl : a.m_sg;
    return plural ? a.f_pl : a.f_sg;
  }

  // A noun phrase. animate: only people and animals (subjects). depth limits nesting.
  NP noun_phrase(double c, int depth, bool animate, Det d) {
    NP np;
    const Noun* n;
    do {
      n = &kNouns[pick(kNouns.size())];
    } while (animate && !n->animate);
    np.plural = chance(0.3);
    np.gender = n->gender;
    np.human = n->animate && (&*n - &kNouns[0]) < 22;  // the first 22 nouns are people
    Phrase dp = det(d, np.plural, np.gender);
    Phrase noun = unit({np.plural ? n->en_pl : n->en_sg}, {np.plural ? n->fr_pl : n->fr_sg});
    std::vector<Phrase> parts{dp};
    bool pre = chance(0.1 + 0.2 * c), post = chance(0.15 + 0.35 * c);
    if (pre) {
      const Adj& a = kPreAdjs[pick(kPreAdjs.size())];
      parts.push_back(unit({a.en}, {adj_form(a, np.plural, np.gender)}));
    }
    if (post) {
      const Adj& a = kPostAdjs[pick(kPostAdjs.size())];
      parts.push_back(unit({a.en}, {adj_form(a, np.plural, np.gender)}));
    }
    parts.push_back(noun);
    // English: det [pre] [post] noun; French: det [pre] noun [post]
    std::vector<size_t> order{0};
    if (pre) order.push_back(1);
    order.push_back(parts.size() - 1);
    if (post) order.push_back(parts.size() - 2);
    np.p = arrange(parts, order);
    double p_mod = depth == 0 ? 0.1 + 0.5 * c : depth == 1 ? 0.05 + 0.25 * c : 0.0;
    if (chance(p_mod)) {
      if (chance(0.5)) {
        np.p.append(prep_phrase(c, depth + 1));
      } else {
        np.p.append(relative(c, depth + 1, np));
      }
    }
    return np;
  }

  Det random_det() {
    size_t k = pick(10);
    return k < 5 ? Det::kThe : k < 7 ? Det::kA : k < 9 ? Det::kThis : Det::kMy;
  }

  Phrase prep_phrase(double c, int depth) {
    size_t k = pick(kPreps.size() + 3);
    if (k == kPreps.size() + 2) {  // "through" -> "à travers" (one word to two)
      NP obj = noun_phrase(c, depth, false, random_det());
      Phrase p = unit({"through"}, {"à", "travers"});
      p.append(obj.p);
      return p;
    }
    if (k == kPreps.size()) {  // "in front of" -> "devant"
      NP obj = noun_phrase(c, depth, false, random_det());
      Phrase p = unit({"in", "front", "of"}, {"devant"});
      p.append(obj.p);
      return p;
    }
    if (k == kPreps.size() + 1) {  // "near" -> "près de", with de + le -> du, de + les -> des
      Det d = pick(2) == 0 ? Det::kThe : Det::kThis;
      NP obj = noun_phrase(c, depth, false, d);
      if (d == Det::kThe && (obj.plural || obj.gender == 'm')) {
        // "near the dog" -> "près du chien": the contracted article belongs to "near" and "the".
        Phrase p;
        p.en = {"near"};
        p.fr = {"près", obj.plural ? "des" : "du"};
        p.links = {{0, 0}, {0, 1}};
        Phrase rest = obj.p;
        // obj.p starts with the article ("the" -> "le"/"les"); replace it by the contraction.
        Phrase merged;
        merged.en = p.en;
        merged.en.insert(merged.en.end(), rest.en.begin(), rest.en.end());
        merged.fr = p.fr;
        merged.fr.insert(merged.fr.end(), rest.fr.begin() + 1, rest.fr.end());
        merged.links = p.links;
        merged.links.emplace_back(1, 1);  // "the" -> "du"/"des"
        for (auto [i, j] : rest.links)
          if (j > 0) merged.links.emplace_back(i + 1, j + 1);
        return merged;
      }
      Phrase p = unit({"near"}, {"près", "de"});
      p.append(obj.p);
      return p;
    }
    NP obj = noun_phrase(c, depth, false, random_det());
    Phrase p = unit({kPreps[k].en}, {kPreps[k].fr});
    p.append(obj.p);
    return p;
  }

  // The verb group: [adv] V [object]  ->  V [adv] [object]
  Phrase verb_phrase(double c, int depth, bool plural) {
    bool trans = chance(0.7);
    const Verb& v = trans ? kTransVerbs[pick(kTransVerbs.size())] : kIntransVerbs[pick(kIntransVerbs.size())];
    Phrase verb = unit({plural ? v.en_pl : v.en_sg}, {plural ? v.fr_pl : v.fr_sg});
    Phrase out;
    if (chance(0.1 + 0.2 * c)) {
      const Word& a = kAdverbs[pick(kAdverbs.size())];
      out = arrange({unit({a.en}, {a.fr}), verb}, {1, 0});
    } else {
      out = verb;
    }
    if (trans) out.append(noun_phrase(c, depth, false, random_det()).p);
    return out;
  }

  // who/that + VP (subject relative, "qui") or whom/that + NP + V (object relative, "que").
  Phrase relative(double c, int depth, const NP& head) {
    if (chance(0.6)) {
      Phrase p = unit({head.human ? "who" : "that"}, {"qui"});
      p.append(verb_phrase(c, depth, head.plural));
      return p;
    }
    Phrase p = unit({head.human ? "whom" : "that"}, {"que"});
    NP subj = noun_phrase(c, depth, true, random_det());
    p.append(subj.p);
    const Verb& v = kTransVerbs[pick(kTransVerbs.size())];
    p.append(unit({subj.plural ? v.en_pl : v.en_sg}, {subj.plural ? v.fr_pl : v.fr_sg}));
    return p;
  }

  Phrase clause(double c) {
    NP subj = noun_phrase(c, 0, true, random_det());
    bool plural = subj.plural;
    Phrase s = subj.p;
    if (chance(0.05 + 0.15 * c)) {  // coordinated subject: the verb becomes plural
      s.append(unit({"and"}, {"et"}));
      s.append(noun_phrase(c, 1, true, random_det()).p);
      plural = true;
    }
    s.append(verb_phrase(c, 1, plural));
    if (chance(0.1 + 0.4 * c)) s.append(prep_phrase(c, 1));
    return s;
  }

  std::mt19937_64 rng_;
};

std::string join_tokens(const std::vector<std::string>& t) {
  std::string s;
  for (size_t i = 0; i < t.size(); ++i) s += (i ? " " : "") + t[i];
  return s;
}

}  // namespace

bool toy_content_word_fr(const std::string& w) {
  static const std::unordered_set<std::string> content = [] {
    std::unordered_set<std::string> c;
    for (const auto& n : kNouns) c.insert({n.fr_sg, n.fr_pl});
    for (const auto* list : {&kPostAdjs, &kPreAdjs})
      for (const auto& a : *list) c.insert({a.m_sg, a.f_sg, a.m_pl, a.f_pl});
    for (const auto* list : {&kTransVerbs, &kIntransVerbs})
      for (const auto& v : *list) c.insert({v.fr_sg, v.fr_pl});
    for (const auto& a : kAdverbs) c.insert(a.fr);
    return c;
  }();
  return content.count(w) > 0;
}

int toy_lexicon_size() {
  return static_cast<int>(kNouns.size() + kPostAdjs.size() + kPreAdjs.size() + kTransVerbs.size() +
                          kIntransVerbs.size() + kAdverbs.size() + kPreps.size() + 3);
}

std::vector<std::pair<ToyPair, ToyPair>> toy_word_order_probe(int n, uint64_t seed) {
  std::mt19937_64 rng(mix_seed(seed, 77));
  std::vector<const Noun*> animate;
  for (const auto& noun : kNouns)
    if (noun.animate) animate.push_back(&noun);
  auto pick = [&](size_t k) { return static_cast<size_t>(rng() % k); };
  auto the = [](bool plural, char gender) { return std::string(plural ? "les" : gender == 'm' ? "le" : "la"); };
  auto pair_of = [&](const Noun& a, const Noun& b, const Verb& v, bool plural) {
    ToyPair p;
    p.en = {"the", plural ? a.en_pl : a.en_sg, plural ? v.en_pl : v.en_sg, "the", plural ? b.en_pl : b.en_sg, "."};
    p.fr = {the(plural, a.gender), plural ? a.fr_pl : a.fr_sg, plural ? v.fr_pl : v.fr_sg, the(plural, b.gender),
            plural ? b.fr_pl : b.fr_sg, "."};
    for (size_t i = 0; i < 6; ++i) p.align.emplace_back(i, i);
    return p;
  };
  std::vector<std::pair<ToyPair, ToyPair>> out;
  std::set<std::string> seen;
  for (int guard = 0; static_cast<int>(out.size()) < n && guard < 100 * n + 1000; ++guard) {
    const Noun &a = *animate[pick(animate.size())], &b = *animate[pick(animate.size())];
    if (&a == &b) continue;
    const Verb& v = kTransVerbs[pick(kTransVerbs.size())];
    const bool plural = pick(10) < 3;
    ToyPair x = pair_of(a, b, v, plural), y = pair_of(b, a, v, plural);
    if (!seen.insert(join_tokens(x.en)).second || !seen.insert(join_tokens(y.en)).second) continue;
    out.emplace_back(std::move(x), std::move(y));
  }
  return out;
}

std::vector<ToyPair> generate_toy_pairs(int n, const ToyCorpusOptions& opt, uint64_t stream) {
  if (opt.min_len < 4) throw UsageError("--min-len: must be >= 4 (the shortest sentence has 4 tokens)");
  if (opt.max_len < opt.min_len) throw UsageError("--max-len: must be >= --min-len");
  if (opt.bucket_width < 1) throw UsageError("bucket width must be >= 1");
  Generator gen(mix_seed(opt.seed, stream));
  // Buckets [lo, hi] of bucket_width English tokens; sentence k goes to bucket k mod count.
  std::vector<std::pair<int, int>> buckets;
  for (int lo = ((opt.min_len - 1) / opt.bucket_width) * opt.bucket_width + 1; lo <= opt.max_len;
       lo += opt.bucket_width)
    buckets.emplace_back(std::max(lo, opt.min_len), std::min(lo + opt.bucket_width - 1, opt.max_len));
  std::vector<ToyPair> out;
  out.reserve(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    auto [lo, hi] = buckets[static_cast<size_t>(k) % buckets.size()];
    Phrase s = gen.sentence(lo, hi);
    out.push_back({std::move(s.en), std::move(s.fr), std::move(s.links)});
  }
  return out;
}

std::vector<ToyCorpusStats> write_toy_corpus(const std::string& dir, const ToyCorpusOptions& opt) {
  for (auto [name, v] : {std::pair{"--train", opt.train}, std::pair{"--valid", opt.valid}, std::pair{"--test", opt.test}})
    if (v < 1 || v > 10000000) throw UsageError(std::string(name) + ": must be in [1, 10000000]");
  if (opt.min_len < 4) throw UsageError("--min-len: must be >= 4 (the shortest sentence has 4 tokens)");
  if (opt.max_len < opt.min_len) throw UsageError("--max-len: must be >= --min-len");
  make_dirs(dir);
  std::vector<ToyCorpusStats> stats;
  std::unordered_set<std::string> seen;  // keep test and valid sentences out of train
  // Test first, then valid, then train, each skipping sentences an earlier split has.
  std::vector<std::pair<std::string, int>> splits = {{"test", opt.test}, {"valid", opt.valid}, {"train", opt.train}};
  std::map<std::string, ToyCorpusStats> by_name;
  uint64_t stream = 0;
  for (auto& [name, count] : splits) {
    ++stream;
    std::string en, fr, al;
    std::set<std::string> en_types, fr_types;
    ToyCorpusStats st;
    int buckets = (opt.max_len + opt.bucket_width - 1) / opt.bucket_width;
    st.length_histogram.assign(static_cast<size_t>(buckets), 0);
    int produced = 0;
    uint64_t round = 0;
    while (produced < count) {
      auto pairs = generate_toy_pairs(count - produced, opt, stream * 1000003ULL + round++);
      for (auto& p : pairs) {
        std::string e = join_tokens(p.en);
        if (!seen.insert(e).second) continue;
        en += e + "\n";
        fr += join_tokens(p.fr) + "\n";
        Alignment a = p.align;
        std::sort(a.begin(), a.end());
        al += format_pharaoh(a) + "\n";
        en_types.insert(p.en.begin(), p.en.end());
        fr_types.insert(p.fr.begin(), p.fr.end());
        ++st.length_histogram[static_cast<size_t>((static_cast<int>(p.en.size()) - 1) / opt.bucket_width)];
        ++produced;
      }
      if (round > 1000) throw UsageError("corpus: cannot produce " + std::to_string(count) + " distinct " + name +
                                         " sentences with these lengths; ask for fewer");
    }
    st.pairs = produced;
    st.en_types = static_cast<int64_t>(en_types.size());
    st.fr_types = static_cast<int64_t>(fr_types.size());
    write_file_atomic(dir + "/" + name + ".en", en);
    write_file_atomic(dir + "/" + name + ".fr", fr);
    write_file_atomic(dir + "/" + name + ".align", al);
    by_name[name] = st;
  }
  // The word-order probe: lines 2k+1 and 2k+2 are a pair that differs only in the order of its two nouns.
  std::string en, fr, al;
  for (const auto& [x, y] : toy_word_order_probe(kToyProbePairs, opt.seed))
    for (const ToyPair* p : {&x, &y}) {
      en += join_tokens(p->en) + "\n";
      fr += join_tokens(p->fr) + "\n";
      al += format_pharaoh(p->align) + "\n";
    }
  write_file_atomic(dir + "/probe.en", en);
  write_file_atomic(dir + "/probe.fr", fr);
  write_file_atomic(dir + "/probe.align", al);
  stats = {by_name["train"], by_name["valid"], by_name["test"]};
  return stats;
}

}  // namespace attnmt
