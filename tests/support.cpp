// The test binary's global environment: what every test shares once the last one has run.
#include <gtest/gtest.h>

#include "support.h"

#include <sstream>

#include "train/trainer.h"

namespace attnmt::test {
namespace {

class RemoveTempPaths : public testing::Environment {
 public:
  void TearDown() override { temp_paths().remove_all(); }
};

// GoogleTest owns and deletes the environment.
testing::Environment* const kRemoveTempPaths = testing::AddGlobalTestEnvironment(new RemoveTempPaths);

}  // namespace

std::vector<std::string> output_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

const std::string& tiny_run() {
  static std::string dir = [] {
    std::string corpus = tiny_toy_corpus("eval_corpus", 64, 8, 12, 20);
    Config c = tiny_config_for(corpus, temp_dir("eval_run"), "bahdanau");
    c.train.epochs = 1;
    c.train.batch_size = 16;
    c.eval.beam_size = 3;
    c.eval.buckets = {5, 10, 15};
    validate(c);
    train(c, {}, torch::kCPU);
    return c.run_dir;
  }();
  return dir;
}

const NoneRun& tiny_none_run() {
  static NoneRun r = [] {
    std::string corpus = tiny_toy_corpus("none_corpus", 32, 6, 6, 12);
    Config c = tiny_config_for(corpus, temp_dir("none_run"), "none");
    c.model.hidden_dim = 8;
    c.train.epochs = 1;
    validate(c);
    train(c, {}, torch::kCPU);
    return NoneRun{corpus, c.run_dir};
  }();
  return r;
}

Trajectories train_straight_and_resumed(const std::string& name, const std::function<Config(const std::string& dir)>& config,
                                        int64_t stop_at, int64_t steps, const std::function<void(const Config&, bool resume)>& run) {
  auto train_it = [&](const Config& c, bool resume) {
    if (run) return run(c, resume);
    TrainOptions o;
    o.resume = resume;
    train(c, o, torch::kCPU);
  };
  const std::string straight = temp_dir(name + "_straight"), split = temp_dir(name + "_split");
  Config c1 = config(straight);
  c1.train.max_steps = steps;
  train_it(c1, false);
  Config c2 = config(split);
  c2.train.max_steps = stop_at;
  train_it(c2, false);
  c2.train.max_steps = steps;
  train_it(c2, true);
  return {straight, split, read_metrics(straight), read_metrics(split)};
}

void expect_same_trajectory(const Trajectories& t, size_t min_records, const std::vector<std::string>& keys) {
  ASSERT_GE(t.straight.size(), min_records);
  ASSERT_EQ(t.resumed.size(), t.straight.size());
  for (size_t i = 0; i < t.straight.size(); ++i) {
    EXPECT_EQ(t.straight[i]["step"], t.resumed[i]["step"]) << "validation " << i;
    for (const auto& k : keys) {
      ASSERT_TRUE(t.straight[i].contains(k)) << k;
      EXPECT_EQ(t.straight[i][k], t.resumed[i][k]) << k << " at step " << t.straight[i]["step"];
    }
  }
}

}  // namespace attnmt::test
