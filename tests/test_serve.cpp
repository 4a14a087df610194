// attnmt serve: OpenNMT-py's request and response shapes, every error status, answers equal to `translate`'s under 32
// concurrent clients, a clean stop on SIGTERM with the request in flight answered, and the page in headless Chromium
// driven over WebDriver (skipped, saying so, without chromium and chromium-driver).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "serve_support.h"
#include "eval/bleu.h"

#include "serve/http.h"
#include "train/trainer.h"

namespace attnmt::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A query value, percent-encoded (all but unreserved characters).
std::string url_encode(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

// `attnmt translate --format jsonl` of the given lines: each line's hypotheses (text, score), best first.
std::vector<std::vector<json>> translate_cli(const std::string& run, const std::vector<std::string>& lines, const std::string& flags) {
  std::string in = temp_dir("serve_tr") + "/in.txt";
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_file(in, text);
  CliResult r = run_cli("--log-level warn translate --run " + run + " --format jsonl " + flags, in);
  EXPECT_EQ(r.code, 0) << r.output;
  std::vector<std::vector<json>> out;
  std::istringstream is(r.output);
  for (std::string l; std::getline(is, l);) {
    json j = json::parse(l, nullptr, false);
    if (j.is_object() && j.contains("hyps")) out.push_back(j["hyps"].get<std::vector<json>>());
  }
  return out;
}

TEST(Serve, AnswersOpenNmtPyRequestsInItsShape) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--run", runs.none});
  ASSERT_GT(srv->port, 0);

  json health = parse(srv->get("/health"));
  EXPECT_EQ(health.value("status", ""), "ok");
  EXPECT_EQ(health.value("models", 0), 2);
  for (const char* path : {"/models", "/translator/models"}) {
    HttpResult r = srv->get(path);
    ASSERT_EQ(r.status, 200) << path;
    json models = parse(r);
    ASSERT_TRUE(models.is_array());
    ASSERT_EQ(models.size(), 2u);
    EXPECT_EQ(models[0]["model_id"], 100);
    EXPECT_EQ(models[1]["model_id"], 101);
    EXPECT_EQ(models[0]["attention"], "bahdanau");
    EXPECT_EQ(models[1]["has_attention"], false);
    ASSERT_TRUE(models[0]["test"].is_object());
    EXPECT_EQ(models[0]["test"]["by_length"].size(), 3u);  // buckets 1-5, 6-10, 11-
  }

  // The request of an OpenNMT-py client: a list of {src, id}; the answer a list (n-best ranks) of lists (inputs).
  const std::vector<std::string> two = {runs.test_src[0], runs.test_src[1]};
  HttpResult r = srv->post("/translator/translate", json::array({{{"src", two[0]}, {"id", 100}}, {{"src", two[1]}, {"id", 100}}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json out = parse(r);
  ASSERT_TRUE(out.is_array());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 2u);
  auto expected = translate_cli(runs.bahdanau, two, "--alignment hard");
  ASSERT_EQ(expected.size(), 2u);
  auto words = [](const std::string& line) { return static_cast<int>(std::count(line.begin(), line.end(), ' ') + 1); };
  for (size_t i = 0; i < 2; ++i) {
    const json& h = out[0][i];
    EXPECT_EQ(h["src"], two[i]);
    EXPECT_EQ(h["tgt"], expected[i][0]["text"]);
    EXPECT_EQ(h["n_best"], 1);
    EXPECT_NEAR(h["pred_score"].get<double>(), expected[i][0]["score"].get<double>(), 1e-4);
    // align: Pharaoh source-target pairs, one per target token, each source index inside the sentence
    ASSERT_TRUE(h["align"].is_string());
    std::istringstream pairs(h["align"].get<std::string>());
    int n = 0;
    std::vector<std::pair<int, int>> links;
    for (std::string p; pairs >> p; ++n) {
      const size_t dash = p.find('-');
      ASSERT_TRUE(dash != std::string::npos && dash > 0) << p;
      int si = std::stoi(p.substr(0, dash)), ti = std::stoi(p.substr(dash + 1));
      EXPECT_LT(si, words(two[i]));
      EXPECT_EQ(ti, n);
      links.emplace_back(si, ti);
    }
    EXPECT_EQ(n, static_cast<int>(expected[i][0]["tokens"].size()));
    // the same links as `translate --alignment hard` (one code path: translate/alignment.h)
    const auto& cli_links = expected[i][0]["alignment"];
    ASSERT_EQ(cli_links.size(), links.size());
    for (size_t k = 0; k < links.size(); ++k) {
      EXPECT_EQ(cli_links[k][0].get<int>(), links[k].first);
      EXPECT_EQ(cli_links[k][1].get<int>(), links[k].second);
    }
  }

  // n-best: beam 3, 3 hypotheses; rank r of input i is translate's r-th hypothesis.
  r = srv->post("/translator/translate", json::array({{{"src", two[0]}, {"id", 100}, {"beam_size", 3}, {"n_best", 3}},
                                                        {{"src", two[1]}, {"id", 100}, {"beam_size", 3}, {"n_best", 3}}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  out = parse(r);
  ASSERT_EQ(out.size(), 3u);
  auto nbest = translate_cli(runs.bahdanau, two, "--beam 3 --nbest 3");
  ASSERT_EQ(nbest.size(), 2u);
  for (size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(out[k].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(nbest[i].size(), 3u);
      EXPECT_EQ(out[k][i]["tgt"], nbest[i][k]["text"]) << "rank " << k << " input " << i;
      EXPECT_EQ(out[k][i]["n_best"], 3);
    }
  }

  // The attention matrix with its tokens, and sentence BLEU against the reference.
  const std::string fr = read_file(runs.corpus + "/test.fr");
  const std::string ref0 = fr.substr(0, fr.find('\n'));
  r = srv->post("/translate", json::array({{{"src", two[0]}, {"attention", true}, {"ref", ref0}}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json h = parse(r)[0][0];
  ASSERT_TRUE(h.contains("attention"));
  const json& att = h["attention"];
  const size_t src_words = static_cast<size_t>(words(two[0]));
  EXPECT_EQ(att["src"].size(), src_words);
  ASSERT_GT(att["tgt"].size(), 0u) << "an empty translation would leave the matrix untested";
  ASSERT_EQ(att["weights"].size(), att["tgt"].size());
  ASSERT_EQ(att["tgt"].size(), expected[0][0]["tokens"].size());
  for (const auto& row : att["weights"]) {
    ASSERT_EQ(row.size(), src_words);
    double sum = 0;
    for (const auto& w : row) sum += w.get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  EXPECT_NEAR(h["bleu"].get<double>(), corpus_bleu({h["tgt"].get<std::string>()}, {{ref0}}).score, 1e-9);
  // The model without attention: by name, no align.
  r = srv->post("/translator/translate", json::array({{{"src", two[0]}, {"id", fs::path(runs.none).filename().string()}}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(parse(r)[0][0].contains("align"));
  EXPECT_EQ(parse(r)[0][0]["tgt"], translate_cli(runs.none, {two[0]}, "")[0][0]["text"]);
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
}

// POST /translator/explain: the JSON of `attnmt explain --format json` for the same sentence, step and beam, decoded on
// the model's worker; what it cannot explain is refused in one line with its status.
TEST(Serve, ExplainsAStepAsTheCommandDoes) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--run", runs.none});
  ASSERT_GT(srv->port, 0);
  const std::string s = runs.test_src[0];
  HttpResult r = srv->post("/translator/explain", json({{"src", s}, {"id", 100}, {"step", 2}, {"beam_size", 3}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json got = parse(r);
  const json cli = json::parse(run_cli("--log-level error explain --run " + runs.bahdanau + " --src '" + s + "' --step 2 --beam 3 --format json").output);
  ASSERT_EQ(got["heads"].size(), 1u);
  ASSERT_EQ(cli["heads"].size(), 1u);
  ASSERT_EQ(got["keys"].size(), cli["keys"].size());
  EXPECT_EQ(got["keys"], cli["keys"]);
  EXPECT_EQ(got["target"], cli["target"]);
  EXPECT_EQ(got["step"], 2);
  const json &w = got["heads"][0]["weights"], &cw = cli["heads"][0]["weights"];
  ASSERT_EQ(w.size(), cw.size());
  double sum = 0;
  for (size_t j = 0; j < w.size(); ++j) {
    EXPECT_NEAR(w[j].get<double>(), cw[j].get<double>(), 1e-6) << j;
    sum += w[j].get<double>();
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(srv->get("/models").status, 200);
  expect_error(srv->post("/translator/explain", json({{"src", s}, {"id", 101}}).dump()), 400, "no attention to explain");
  expect_error(srv->post("/translator/explain", json({{"src", s}, {"step", 250}}).dump()), 400, "--step must be between");
  expect_error(srv->post("/translator/explain", json({{"src", s}, {"part", "encoder"}}).dump()), 400, "needs a self-attention encoder");
  expect_error(srv->post("/translator/explain", json({{"src", s}, {"part", "sideways"}}).dump()), 400, "\"part\"");
  expect_error(srv->post("/translator/explain", json({{"src", s}, {"steps", 2}}).dump()), 400, "unknown key \"steps\"");
  expect_error(srv->post("/translator/explain", json::array({{{"src", s}}}).dump()), 400, "one JSON object");
  expect_error(srv->post("/translator/explain", json({{"src", "   "}}).dump()), 400, "empty");
  expect_error(srv->get("/translator/explain"), 405, "method not allowed");
  EXPECT_EQ(srv->stop(), 0);
}

TEST(Serve, RefusesBadRequestsWithTheirStatus) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--run", runs.none, "--max-request-bytes", "2000", "--max-sentences", "4",
                           "--max-words", "20", "--max-queue", "3", "--max-beam", "8"});
  ASSERT_GT(srv->port, 0);
  const std::string s = runs.test_src[0];
  auto one = [&](json extra) {
    json item = {{"src", s}};
    if (extra.is_object()) item.update(extra);
    return json::array({item}).dump();
  };
  expect_error(srv->post("/translator/translate", "[{\"src\": \"a\""), 400, "malformed JSON");
  expect_error(srv->post("/translator/translate", "[{\"src\": \"a\", \"id\": 1e999}]"), 400, "malformed JSON");  // fuzz: number overflow
  expect_error(srv->post("/translator/translate", "{\"src\": \"a\"}"), 400, "JSON list");
  expect_error(srv->post("/translator/translate", "[]"), 400, "empty");
  expect_error(srv->post("/translator/translate", "[{\"id\": 100}]"), 400, "\"src\"");
  expect_error(srv->post("/translator/translate", "[3]"), 400, "not an object");
  expect_error(srv->post("/translator/translate", one({{"id", 999}})), 404, "no model with id 999");
  expect_error(srv->post("/translator/translate", one({{"id", 1.5}})), 400, "\"id\"");
  expect_error(srv->post("/translator/translate", json::array({{{"src", s}, {"id", 100}}, {{"src", s}, {"id", 101}}}).dump()), 400, "same model");
  expect_error(srv->post("/translator/translate", one({{"beam", 3}})), 400, "unknown key \"beam\"");
  expect_error(srv->post("/translator/translate", one({{"beam_size", 0}})), 400, "beam_size");
  expect_error(srv->post("/translator/translate", one({{"beam_size", 9}})), 400, "out of range");
  expect_error(srv->post("/translator/translate", one({{"beam_size", 2}, {"n_best", 3}})), 400, "n_best");
  expect_error(srv->post("/translator/translate", one({{"align", "yes"}})), 400, "true or false");
  expect_error(srv->post("/translator/translate", one({{"ref", 3}})), 400, "\"ref\"");
  expect_error(srv->post("/translator/translate", one({{"id", 101}, {"attention", true}})), 400, "no attention weights");
  expect_error(srv->post("/translator/translate", json::array({{{"src", s}, {"beam_size", 1}}, {{"src", s}, {"beam_size", 2}}}).dump()), 400, "other options");
  std::string long_line;
  for (int i = 0; i < 21; ++i) long_line += "w ";
  expect_error(srv->post("/translator/translate", json::array({{{"src", long_line}}}).dump()), 400, "21 words");
  expect_error(srv->post("/translator/translate", "[{\"src\": \"\xff\xfe\"}]"), 400, "");
  expect_error(srv->post("/translator/translate", "[{\"src\": \"the\\u0000cat\"}]"), 400, "NUL");  // as translate and train refuse it
  // Oversized: a body over --max-request-bytes, more sentences than --max-sentences.
  expect_error(srv->post("/translator/translate", json::array({{{"src", std::string(3000, 'a')}}}).dump()), 413, "limit");
  json five = json::array();
  for (int i = 0; i < 5; ++i) five.push_back({{"src", s}});
  expect_error(srv->post("/translator/translate", five.dump()), 413, "5 sentences");
  // Four sentences can never fit a queue of three: 413, not the 503 "retry later" of a queue that is busy.
  json four = json::array();
  for (int i = 0; i < 4; ++i) four.push_back({{"src", s}});
  expect_error(srv->post("/translator/translate", four.dump()), 413, "4 sentences can never fit model 100's queue of 3 (--max-queue)");
  expect_error(srv->get("/nothing/here"), 404, "no such path");
  expect_error(srv->get("/translator/translate"), 405, "method not allowed (use POST)");  // a known path, another method
  expect_error(http_request("127.0.0.1", srv->port, "DELETE", "/models"), 405, "use GET");
  // Still serving after all of that.
  HttpResult ok = srv->post("/translator/translate", one({}));
  EXPECT_EQ(ok.status, 200) << ok.body;
  // A request HTTP itself cannot read says so, not just "HTTP 400".
  const std::string unreadable = raw_exchange(srv->port, "POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                                  "application/json\r\nContent-Length: 12x\r\nConnection: close\r\n\r\n[]");
  EXPECT_NE(unreadable.find("HTTP/1.1 400"), std::string::npos) << unreadable;
  EXPECT_NE(unreadable.find("could not be read"), std::string::npos) << unreadable;
  // JSON bodies only (a web page could POST these to a loopback server without a CORS preflight).
  expect_error(http_request("127.0.0.1", srv->port, "POST", "/translator/translate", one({}), 30, "text/plain"), 415, "'text/plain'");
  expect_error(http_request("127.0.0.1", srv->port, "POST", "/translator/translate", one({}), 30,
                            "application/x-www-form-urlencoded"), 415, "Content-Type: application/json");
  EXPECT_EQ(http_request("127.0.0.1", srv->port, "POST", "/translator/translate", one({}), 30, "Application/JSON; charset=utf-8").status, 200);
  // /models names the runs; it does not disclose where they are on disk.
  EXPECT_EQ(srv->get("/models").body.find(runs.bahdanau), std::string::npos);
  EXPECT_GE(parse(srv->get("/health")).value("refused", 0), 20);
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);

  // A request not decoded in time is answered 503.
  auto slow = start_server({"--run", runs.bahdanau, "--timeout", "0.001"});
  ASSERT_GT(slow->port, 0);
  json many = json::array();
  for (int i = 0; i < 32; ++i) many.push_back({{"src", runs.test_src[static_cast<size_t>(i) % runs.test_src.size()]}, {"beam_size", 10}});
  expect_error(slow->post("/translator/translate", many.dump()), 503, "not decoded within");
  EXPECT_EQ(slow->stop(), 0);

  // Command-line errors: one line, exit 2.
  CliResult bad = run_cli("serve --run " + runs.corpus + "/no_such_run --port 0");
  EXPECT_EQ(bad.code, 2) << bad.output;
  auto first = start_server({"--run", runs.bahdanau});
  ASSERT_GT(first->port, 0);
  CliResult taken = run_cli("serve --run " + runs.bahdanau + " --port " + std::to_string(first->port));
  EXPECT_EQ(taken.code, 2) << taken.output;
  EXPECT_NE(taken.output.find("cannot listen"), std::string::npos) << taken.output;
}

// 32 clients at once, 20 requests each, each a sentence of the test set: every answer is translate's for that sentence,
// and sentences of requests that arrived together were decoded in shared batches.
TEST(Serve, ConcurrentClientsGetWhatTranslateGives) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau});
  ASSERT_GT(srv->port, 0);
  auto expected = translate_cli(runs.bahdanau, runs.test_src, "--beam 1");
  ASSERT_EQ(expected.size(), runs.test_src.size());
  const int kClients = 32, kRequests = 20;
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < kRequests; ++k) {
        const size_t i = static_cast<size_t>(c * kRequests + k) % runs.test_src.size();
        HttpResult r = srv->post("/translator/translate", json::array({{{"src", runs.test_src[i]}, {"id", 100}, {"beam_size", 1}}}).dump());
        json j = json::parse(r.body, nullptr, false);
        if (r.status != 200 || !j.is_array() || j.size() != 1 || j[0].size() != 1) {
          failures[static_cast<size_t>(c)] += "status " + std::to_string(r.status) + " " + r.error + " " + r.body + "\n";
        } else if (j[0][0]["tgt"] != expected[i][0]["text"]) {
          failures[static_cast<size_t>(c)] += "sentence " + std::to_string(i) + ": " + j[0][0]["tgt"].dump() + " vs " + expected[i][0]["text"].dump() + "\n";
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(failures[static_cast<size_t>(c)], "") << "client " << c;
  json health = parse(srv->get("/health"));
  EXPECT_EQ(health.value("sentences", 0), kClients * kRequests);
  EXPECT_LT(health.value("batches", 0), kClients * kRequests) << "no two requests were ever decoded together";
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
}

TEST(Serve, TheHostHeaderNamesThisServer) {
  const std::vector<std::string> none, lab = {"mt.lab"};
  for (const char* ok : {"", "127.0.0.1:5000", "127.0.0.1", "localhost:5000", "LOCALHOST.", "[::1]:5000", "10.1.2.3:80"})
    EXPECT_TRUE(host_allowed(ok, none)) << ok;
  for (const char* bad : {"evil.example", "evil.example:5000", "localhost.evil.example", "mt.lab:5000"})
    EXPECT_FALSE(host_allowed(bad, none)) << bad;
  EXPECT_TRUE(host_allowed("mt.lab:5000", lab));
  EXPECT_TRUE(host_allowed("MT.Lab", lab));
  for (const char* lo : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) EXPECT_TRUE(is_loopback(lo)) << lo;
  for (const char* other : {"0.0.0.0", "::", "192.168.1.2", "example.org"}) EXPECT_FALSE(is_loopback(other)) << other;
}

// A DNS-rebinding guard and an optional token: a page elsewhere whose name now points here is refused (403); with
// --token the API answers 401 without "Authorization: Bearer TOKEN", the page itself is still served; a server on an
// address other machines reach says in its log whether anything protects it.
TEST(Serve, HostCheckAndTokenGuardTheApi) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--token", "s3cret", "--allow-host", "mt.lab"});
  ASSERT_GT(srv->port, 0);
  auto get = [&](const std::string& path, const std::string& host, const std::string& auth) {
    return raw_status(srv->port, "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" +
                                     (auth.empty() ? "" : "Authorization: " + auth + "\r\n") + "Connection: close\r\n\r\n");
  };
  EXPECT_EQ(get("/models", "evil.example", "Bearer s3cret"), 403);
  EXPECT_EQ(get("/models", "mt.lab:80", ""), 401);
  EXPECT_EQ(get("/models", "127.0.0.1", "Bearer s3cre"), 401);
  EXPECT_EQ(get("/models", "127.0.0.1", "Bearer s3cretX"), 401);
  EXPECT_EQ(get("/models", "mt.lab", "Bearer s3cret"), 200);
  EXPECT_EQ(get("/", "localhost", ""), 200);  // the page; it sends the token from its #token=
  expect_error(srv->post("/translator/translate", json::array({{{"src", runs.test_src[0]}}}).dump()), 401, "Bearer");
  EXPECT_NE(read_file(srv->log).find("#token=s3cret"), std::string::npos) << "the page's address with its token";
  EXPECT_EQ(read_file(srv->log).find("no authentication"), std::string::npos);
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);

  auto open = start_server({"--run", runs.bahdanau, "--host", "0.0.0.0"});
  ASSERT_GT(open->port, 0);
  EXPECT_EQ(open->get("/health").status, 200);
  EXPECT_EQ(open->stop(), 0);
  EXPECT_NE(read_file(open->log).find("there is no authentication"), std::string::npos) << read_file(open->log);
}

// Limits counted in what the model decodes: a sentence's tokens after tokenization, and a request's tokens times its
// beam size; 413 naming the limit, before any decoding. (Words are counted before that, as "words": 400.)
TEST(Serve, LimitsCountTokensTimesBeamBeforeDecoding) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--max-tokens", "6", "--max-cost", "30"});
  ASSERT_GT(srv->port, 0);
  auto item = [](const std::string& src, int beam) { return json::array({{{"src", src}, {"beam_size", beam}}}).dump(); };
  expect_error(srv->post("/translator/translate", item("a b c d e f g", 1)), 413, "sentence 1: 7 tokens after tokenization, over the limit of 6 (--max-tokens)");
  expect_error(srv->post("/translator/translate", item("a b c d e f", 6)), 413, "come to 36, over the limit of 30 (--max-cost)");
  HttpResult ok = srv->post("/translator/translate", item("a b c d e", 6));  // 5 x 6 = 30: at the limit
  EXPECT_EQ(ok.status, 200) << ok.body;
  json two = json::array({{{"src", "a b c"}, {"beam_size", 5}}, {{"src", "a b c d"}, {"beam_size", 5}}});  // (3 + 4) x 5
  expect_error(srv->post("/translator/translate", two.dump()), 413, "come to 35");
  EXPECT_EQ(parse(srv->get("/health")).value("batches", -1), 1) << "a refused request was decoded";
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
}

// A request whose deadline passes stops being decoded at the next decoder step: the model is free for the next one,
// which is answered within its own deadline although the first would have held the model for many seconds.
TEST(Serve, ADecodePastItsDeadlineIsCancelledAndTheModelFreed) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  // Batches of 64 sentences, so that a decoder step is short even under the sanitizers (the cancellation waits for
  // the step it is in; with one batch of all 4,096 sentences at beam 32, a step under ASan outlasted the next
  // request's second).
  auto srv = start_server({"--run", runs.bahdanau, "--timeout", "1", "--max-sentences", "32768", "--max-queue", "32768",
                           "--max-request-bytes", "10000000", "--max-cost", "100000000", "--max-batch", "64"});
  ASSERT_GT(srv->port, 0);
  // 32,768 sentences at beam 32, far more than a second's decoding on any CPU so far: 4,096 took about 10 s on a
  // Zen 1 core and under 2 s on a Zen 5 one, where a request of that size was answered before a 2-second deadline.
  json many = json::array();
  for (int i = 0; i < 32768; ++i) many.push_back({{"src", runs.test_src[static_cast<size_t>(i) % runs.test_src.size()]}, {"beam_size", 32}});
  expect_error(srv->post("/translator/translate", many.dump()), 503, "not decoded within 1 s");
  HttpResult next = srv->post("/translator/translate", json::array({{{"src", runs.test_src[0]}}}).dump());
  EXPECT_EQ(next.status, 200) << next.body << " (the model still busy with the abandoned request?)";
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
  EXPECT_NE(read_file(srv->log).find("decoding stopped: every request of its batch gave up"), std::string::npos)
      << read_file(srv->log);
}

// SIGTERM while a short request is being decoded: it is answered (within the shutdown's second of grace), then the
// server exits 0 and listens no more. (A long one is cancelled: ServeHttp.ShutdownCancelsALongDecodeWithinTwoSeconds.)
TEST(Serve, StopsCleanlyAnsweringWhatIsInFlight) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--max-sentences", "4096", "--max-request-bytes", "10000000"});
  ASSERT_GT(srv->port, 0);
  json many = json::array();
  for (int i = 0; i < 64; ++i) many.push_back({{"src", runs.test_src[static_cast<size_t>(i) % runs.test_src.size()]}, {"beam_size", 3}});
  HttpResult answer;
  std::thread client([&] { answer = srv->post("/translator/translate", many.dump()); });
  // Wait until the server holds the request (its queue or a batch), then stop it.
  for (int i = 0; i < 400 && parse(srv->get("/health")).value("requests", 0) < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int port = srv->port;
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
  client.join();
  EXPECT_EQ(answer.status, 200) << answer.error << answer.body.substr(0, 200);
  json out = json::parse(answer.body, nullptr, false);
  ASSERT_TRUE(out.is_array());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].size(), 64u);
  EXPECT_EQ(http_request("127.0.0.1", port, "GET", "/health", "", 2).status, 0) << "still listening after the stop";
}

// --- the page in a real browser, over WebDriver (chromedriver) ---

struct WebDriver {
  pid_t pid = -1;
  int port = 0;
  std::string session;
  ~WebDriver() {
    if (!session.empty()) http_request("127.0.0.1", port, "DELETE", "/session/" + session);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  json call(const std::string& method, const std::string& path, const json& body = json::object()) {
    HttpResult r = http_request("127.0.0.1", port, method, "/session/" + session + path, method == "GET" ? "" : body.dump(), 60);
    json j = json::parse(r.body, nullptr, false);
    EXPECT_EQ(r.status, 200) << method << " " << path << ": " << r.body.substr(0, 300);
    return j.is_object() && j.contains("value") ? j["value"] : json();
  }
  std::string find(const std::string& css) {
    json v = call("POST", "/element", {{"using", "css selector"}, {"value", css}});
    return v.is_object() ? v.begin().value().get<std::string>() : "";
  }
  std::vector<std::string> find_all(const std::string& css) {
    json v = call("POST", "/elements", {{"using", "css selector"}, {"value", css}});
    std::vector<std::string> ids;
    for (const auto& e : v) ids.push_back(e.begin().value().get<std::string>());
    return ids;
  }
  std::string text(const std::string& element) { return call("GET", "/element/" + element + "/text").get<std::string>(); }
};

std::string which(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/lib/chromium"}) {
    std::string p = std::string(dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string base64_decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t val = 0;  // the last bits read (at most 14 are ever needed)
  int bits = -8;
  for (char c : in) {
    size_t d = chars.find(c);
    if (d == std::string::npos) continue;
    val = ((val << 6) | static_cast<uint32_t>(d)) & 0xFFFFFu;
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

TEST(Serve, ThePageShowsTranslationAndMapInChromium) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const std::string driver = which("chromedriver"), browser = which("chromium");
  if (driver.empty() || browser.empty()) GTEST_SKIP() << "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--run", runs.none});
  ASSERT_GT(srv->port, 0);
  HttpResult page = srv->get("/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.body.find("http://"), std::string::npos) << "the page must not fetch anything from elsewhere";
  EXPECT_EQ(page.body.find("https://"), std::string::npos);

  WebDriver wd;
  const std::string log = temp_dir("serve_wd") + "/chromedriver.log";
  // chromedriver picks no port by itself: take a free one from the kernel first.
  {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t n = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    wd.port = ntohs(a.sin_port);
    ::close(fd);
  }
  {
    std::vector<std::string> args = {driver, "--port=" + std::to_string(wd.port)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    ASSERT_EQ(posix_spawn(&wd.pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  for (int i = 0; i < 200 && http_request("127.0.0.1", wd.port, "GET", "/status", "", 1).status != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  json caps = {{"capabilities",
                {{"alwaysMatch",
                  {{"browserName", "chrome"},
                   {"goog:chromeOptions",
                    {{"binary", browser}, {"args", {"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"}}}}}}}}};
  HttpResult s = http_request("127.0.0.1", wd.port, "POST", "/session", caps.dump(), 120);
  ASSERT_EQ(s.status, 200) << s.body << read_file(log);
  wd.session = json::parse(s.body)["value"]["sessionId"].get<std::string>();

  wd.call("POST", "/url", {{"url", "http://127.0.0.1:" + std::to_string(srv->port) + "/"}});
  for (int i = 0; i < 100 && wd.find_all("body[data-ready]").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(wd.find_all("body[data-ready]").size(), 1u) << "the page did not load its models";
  const std::string sentence = runs.test_src[3];
  wd.call("POST", "/element/" + wd.find("#src") + "/value", {{"text", sentence}});
  wd.call("POST", "/element/" + wd.find("#go") + "/click");
  std::vector<std::string> tgts;
  for (int i = 0; i < 200; ++i) {
    tgts = wd.find_all(".card .tgt");
    if (tgts.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(tgts.size(), 2u) << "both models should answer";
  // The page's beam is 5 by default: compare with translate --beam 5.
  EXPECT_EQ(wd.text(wd.find("#out-100 .tgt")), translate_cli(runs.bahdanau, {sentence}, "--beam 5")[0][0]["text"].get<std::string>());
  EXPECT_EQ(wd.text(wd.find("#out-101 .tgt")), translate_cli(runs.none, {sentence}, "--beam 5")[0][0]["text"].get<std::string>());
  // The map: one cell per (target token, source word); none for the model without attention.
  const size_t src_words = static_cast<size_t>(std::count(sentence.begin(), sentence.end(), ' ') + 1);
  const std::vector<std::string> cells = wd.find_all("#out-100 table.map td.w");
  const std::vector<std::string> rows = wd.find_all("#out-100 table.map tbody tr");
  ASSERT_GT(rows.size(), 0u);
  EXPECT_EQ(cells.size(), rows.size() * src_words);
  EXPECT_EQ(wd.find_all("#out-101 table.map td.w").size(), 0u);
  // Hover over the first cell: the line names the source word, the target word and the weight.
  ASSERT_FALSE(cells.empty());
  const std::string first_word = sentence.substr(0, sentence.find(' '));
  wd.call("POST", "/actions",
          {{"actions", json::array({{{"type", "pointer"}, {"id", "mouse"}, {"parameters", {{"pointerType", "mouse"}}},
                                     {"actions", json::array({{{"type", "pointerMove"}, {"duration", 0}, {"x", 0}, {"y", 0},
                                                               {"origin", {{"element-6066-11e4-a52e-4f735466cecf", cells[0]}}}}})}}})}});
  const std::string hover = wd.text(wd.find("#out-100 .hover"));
  EXPECT_NE(hover.find("source \u201c" + first_word + "\u201d"), std::string::npos) << hover;
  EXPECT_NE(hover.find("weight 0."), std::string::npos) << hover;
  // A click on the map's first row explains step 1: one row per source word, weights summing to one, the same numbers
  // as `attnmt explain`.
  wd.call("POST", "/element/" + rows[0] + "/click");
  std::vector<std::string> lookup;
  for (int i = 0; i < 200 && (lookup = wd.find_all("#out-100 .explain table.lookup tr")).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(lookup.size(), src_words + 1) << wd.text(wd.find("#out-100 .explain"));  // a header row, then one per word
  const std::string explained = wd.text(wd.find("#out-100 .explain"));
  EXPECT_NE(explained.find("step 1, which produced"), std::string::npos) << explained;
  EXPECT_NE(explained.find("the weights sum to 1.000"), std::string::npos) << explained;
  const json cli = json::parse(run_cli("--log-level error explain --run " + runs.bahdanau + " --src '" + sentence + "' --beam 5 --format json").output);
  ASSERT_EQ(cli["heads"][0]["weights"].size(), src_words);
  char first_weight[32];
  std::snprintf(first_weight, sizeof first_weight, "%.3f", cli["heads"][0]["weights"][0].get<double>());
  EXPECT_EQ(wd.text(wd.find_all("#out-100 .explain table.lookup tr td:nth-child(4)").at(0)), first_weight);
  // A screenshot as a user sees the page (ATTNMT_SERVE_SCREENSHOT=FILE keeps it, e.g. for docs/serve/page.png).
  std::string png = base64_decode(wd.call("GET", "/screenshot").get<std::string>());
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  if (const char* keep = std::getenv("ATTNMT_SERVE_SCREENSHOT")) write_file(keep, png);
  // A link with a beam and an n-best that the menus lack (3 and 2): both work, each card lists 2 translations.
  wd.call("POST", "/url", {{"url", "http://127.0.0.1:" + std::to_string(srv->port) + "/?src=" + url_encode(sentence) + "&beam=3&nbest=2"}});
  for (int i = 0; i < 200 && wd.find_all("body[data-done]").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(wd.find_all("body[data-done]").size(), 1u) << "the link did not translate on load";
  EXPECT_EQ(wd.find_all(".card .error").size(), 0u) << wd.text(wd.find("#out-100"));
  EXPECT_EQ(wd.find_all("#out-100 ol.nbest li").size(), 2u);
  EXPECT_EQ(wd.text(wd.find("#out-100 .tgt")), translate_cli(runs.bahdanau, {sentence}, "--beam 3")[0][0]["text"].get<std::string>());
  EXPECT_EQ(srv->stop(), 0);

  // A self-attention model, its explanation opened from the address at the decoder's self-attention: the selectors of
  // attention, layer and head, the layer's map, and the causal mask (the keys after the query masked).
  Config sa = tiny_self_attention_config_for(runs.corpus, temp_dir("serve_sa"), 2);
  sa.model.embed_dim = sa.model.hidden_dim = 32;
  sa.train.max_steps = 40;
  sa.train.batch_size = 16;
  sa.eval.beam_size = 1;
  validate(sa);
  train(sa, {}, torch::kCPU);
  auto srv2 = start_server({"--run", sa.run_dir});
  ASSERT_GT(srv2->port, 0);
  const json cli_sa = json::parse(run_cli("--log-level error explain --run " + sa.run_dir + " --src '" + sentence +
                                          "' --beam 1 --part decoder --layer 1 --step 2 --format json").output);
  ASSERT_TRUE(cli_sa.contains("keys")) << cli_sa.dump();
  const size_t keys = cli_sa["keys"].size();
  ASSERT_GE(keys, 3u) << "the test needs a translation of two tokens or more";
  wd.call("POST", "/url", {{"url", "http://127.0.0.1:" + std::to_string(srv2->port) + "/?src=" + url_encode(sentence) +
                                       "&beam=1&nbest=1&explain=2&part=decoder&layer=1"}});
  for (int i = 0; i < 200 && wd.find_all("body[data-done]").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(wd.find_all("body[data-done]").size(), 1u) << "the link did not translate and explain on load";
  ASSERT_EQ(wd.find_all("#out-100 .explain table.lookup").size(), 1u) << wd.text(wd.find("#out-100"));
  EXPECT_EQ(wd.find_all("#out-100 .explain select.part option").size(), 3u);   // cross, encoder, decoder
  EXPECT_EQ(wd.find_all("#out-100 .explain select.layer option").size(), 2u);  // layer 1 of 2, 2 of 2
  EXPECT_EQ(wd.find_all("#out-100 .explain select.head option").size(), 2u);
  EXPECT_EQ(wd.find_all("#out-100 .explain table.lookup tr.masked").size(), keys - 2);  // step 2 sees <bos> and itself
  EXPECT_EQ(wd.find_all("#out-100 .explain table.layermap tbody tr").size(), keys);     // the layer's map, every position
  EXPECT_NE(wd.text(wd.find("#out-100 .explain")).find("decoder self-attention (causal), layer 1"), std::string::npos);
  // The card's own map says which of the model's attentions it is.
  EXPECT_NE(wd.text(wd.find("#out-100 .mapbox caption")).find("cross-attention of the last decoder layer (layer 2 of 2)"),
            std::string::npos) << wd.text(wd.find("#out-100 .mapbox caption"));
  // ATTNMT_EXPLAIN_SCREENSHOT=FILE keeps a picture of it.
  png = base64_decode(wd.call("GET", "/screenshot").get<std::string>());
  ASSERT_GT(png.size(), 1000u);
  if (const char* keep = std::getenv("ATTNMT_EXPLAIN_SCREENSHOT")) write_file(keep, png);
  EXPECT_EQ(srv2->stop(), 0);
}

}  // namespace
}  // namespace attnmt::test
