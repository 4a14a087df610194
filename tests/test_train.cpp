#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <fstream>
#include <sstream>
#include <map>

#include <ATen/CPUGeneratorImpl.h>

#include "common/config.h"
#include "common/errors.h"
#include "data/toy_corpus.h"
#include "support.h"
#include "run/run_dir.h"
#include "kernels/packed_product.h"
#include "common/dispatch_count.h"
#include "kernels/adam.h"
#include "kernels/mode.h"
#include "train/trainer.h"

using namespace attnmt;

namespace {

// A tiny corpus (generated once per test binary run) and a tiny model config over it.
const std::string& tiny_corpus() {
  static std::string dir = test::tiny_toy_corpus("train_corpus", 96, 12, 12, 20);
  return dir;
}

Config tiny_config(const std::string& run_dir, const std::string& attention = "bahdanau") {
  Config c = test::tiny_config_for(tiny_corpus(), run_dir, attention);
  c.model.dropout = 0.2;  // dropout draws random numbers: resume must restore the generator
  c.train.batch_size = 16;
  c.train.epochs = 3;
  c.train.valid_every = 4;
  c.train.seed = 7;
  c.train.teacher_forcing = 0.8;  // sampling draws random numbers too
  c.eval.batch_size = 16;
  validate(c);
  return c;
}

std::vector<nlohmann::json> metrics(const std::string& dir) { return test::read_metrics(dir); }

}  // namespace

TEST(Train, SameSeedSameNumbers) {
  std::string a = test::temp_dir("train_det_a"), b = test::temp_dir("train_det_b");
  Config ca = tiny_config(a), cb = tiny_config(b);
  ca.train.max_steps = cb.train.max_steps = 8;
  train(ca, {}, torch::kCPU);
  train(cb, {}, torch::kCPU);
  auto ma = metrics(a), mb = metrics(b);
  ASSERT_EQ(ma.size(), 3u);  // steps 4, 6 (end of epoch 1: 96 pairs / 16) and 8
  ASSERT_EQ(mb.size(), ma.size());
  for (size_t i = 0; i < ma.size(); ++i)
    for (const char* k : {"step", "train_loss", "valid_loss", "valid_ppl", "valid_bleu", "lr"})
      EXPECT_EQ(ma[i][k], mb[i][k]) << k << " at validation " << i;
  for (const char* f : {"config.json", "src.vocab", "tgt.vocab", "best.pt", "last.pt"})
    EXPECT_TRUE(std::filesystem::exists(a + "/" + f)) << f;
  // Lines logged before the run directory existed (corpus and vocabulary) are copied into train.log.
  std::string log = test::read_file(a + "/train.log");
  EXPECT_NE(log.find("pairs read"), std::string::npos) << log.substr(0, 300);
  EXPECT_NE(log.find("vocabularies: source"), std::string::npos);
}

// Training's products on the packed kernel and on the BLAS (kernels/packed_product.h): the same trajectory to float
// rounding, and each of the two deterministic on its own (the run above takes whichever the machine chooses).
TEST(Train, PackedProductsGiveTheBlasTrajectory) {
  if (!PackedLinear::available()) {
    std::printf("[ SKIPPED  ] no AVX-512 on this CPU: training's products are the BLAS's here\n");
    return;
  }
  struct Reset {
    ~Reset() { set_product_kernel(ProductKernel::kAuto); }
  } reset;
  std::map<std::string, std::vector<nlohmann::json>> runs;
  for (const char* kernel : {"packed", "blas", "packed"}) {
    ProductKernel k;
    ASSERT_TRUE(parse_product_kernel(kernel, &k));
    set_product_kernel(k);
    const std::string name = std::string(kernel) + (runs.count(kernel) ? "_again" : "");
    const std::string dir = test::temp_dir("train_products_" + name);
    Config c = tiny_config(dir);
    c.train.max_steps = 6;
    train(c, {}, torch::kCPU);
    runs[name] = metrics(dir);
  }
  const auto &packed = runs["packed"], &blas = runs["blas"], &again = runs["packed_again"];
  ASSERT_EQ(packed.size(), 2u);
  ASSERT_EQ(blas.size(), packed.size());
  ASSERT_EQ(again.size(), packed.size());
  for (size_t i = 0; i < packed.size(); ++i) {
    for (const char* k : {"train_loss", "valid_loss"}) {
      EXPECT_EQ(packed[i][k], again[i][k]) << k << " at validation " << i;
      EXPECT_NEAR(packed[i][k].get<double>(), blas[i][k].get<double>(), 1e-4 * std::abs(blas[i][k].get<double>())) << k;
    }
  }
}

TEST(Train, ResumeGivesTheSameTrajectory) {
  int64_t resumed_to = 0;
  // 16 steps cross an epoch boundary (6 batches per epoch); stopped at 8, resumed to 16.
  const auto t = test::train_straight_and_resumed("train", [](const std::string& dir) { return tiny_config(dir); }, 8, 16,
                                                  [&](const Config& c, bool resume) {
                                                    TrainOptions o;
                                                    o.resume = resume;
                                                    const TrainResult r = train(c, o, torch::kCPU);
                                                    if (resume) resumed_to = r.state.step;
                                                  });
  EXPECT_EQ(resumed_to, 16);
  test::expect_same_trajectory(t, 4, {"train_loss", "valid_loss", "valid_bleu"});
}

// lr_schedule `step`: the rate is halved after update 3 and after every 2 from there (3, 5, 7, ...), by the update
// count alone, so a run stopped at 4 and resumed halves it at 5, 7 and 9 as the straight run does.
TEST(Train, StepScheduleReducesTheRateAtItsUpdatesAndResumesThere) {
  const auto config = [](const std::string& dir) {
    Config c = tiny_config(dir);
    c.train.lr = 0.008;
    c.train.valid_every = 2;
    c.train.lr_schedule.type = "step";
    c.train.lr_schedule.start = 3;
    c.train.lr_schedule.every = 2;
    c.train.lr_schedule.factor = 0.5;
    validate(c);
    return c;
  };
  const auto t = test::train_straight_and_resumed("step_lr", config, 4, 10);
  ASSERT_EQ(t.straight.size(), 5u);  // validations at updates 2, 4, 6, 8, 10
  const std::vector<double> want = {0.008, 0.004, 0.002, 0.001, 0.0005};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(t.straight[i]["step"].get<int64_t>(), 2 * static_cast<int64_t>(i + 1));
    EXPECT_DOUBLE_EQ(t.straight[i]["lr"].get<double>(), want[i]) << "at validation " << i;
  }
  test::expect_same_trajectory(t, 4, {"train_loss", "valid_loss", "lr"});
}

// A step schedule whose first reduction lies beyond what the time budget holds at this pace is named in the log, once,
// with a start that fits; a schedule already reducing is not.
TEST(Train, StepScheduleOutOfTheTimeBudgetsReachIsNamed) {
  const auto log_with_start = [](const std::string& name, int start) {
    const std::string dir = test::temp_dir("step_reach_" + name);
    Config c = tiny_config(dir);
    c.train.epochs = 100000;
    c.train.max_minutes = 0.02;  // 1.2 seconds: a few hundred updates of the tiny model at most
    c.train.valid_every = 2;
    c.train.lr_schedule.type = "step";
    c.train.lr_schedule.start = start;
    c.train.lr_schedule.every = 1000;
    validate(c);
    const TrainResult r = train(c, {}, torch::kCPU);
    EXPECT_EQ(r.ended_by, "max_minutes") << name;
    return test::read_file(dir + "/train.log");
  };
  const std::string far = log_with_start("far", 100000000);
  const std::string warning = "train.lr_schedule.start is 100000000, but at this pace the 0.02-minute budget ends near update ";
  const size_t at = far.find(warning);
  ASSERT_NE(at, std::string::npos) << far;
  EXPECT_EQ(far.find(warning, at + 1), std::string::npos) << "said more than once";
  long long end = -1;
  ASSERT_EQ(std::sscanf(far.c_str() + at + warning.size(), "%lld", &end), 1);
  EXPECT_GE(end, 1);  // every run validates at its end, at least after update 1
  EXPECT_LT(end, 100000000);
  EXPECT_EQ(far.find("brings the rate down"), std::string::npos) << far;
  const std::string near = log_with_start("near", 1);
  EXPECT_EQ(near.find("would never reduce"), std::string::npos) << near;
  EXPECT_EQ(near.find("brings the rate down"), std::string::npos) << near;  // 1/64 of the rate at update 5,001
}

// The other misfit: a step schedule that has annealed the rate to 1/64 of train.lr within the first half of what the
// budget holds at this pace is named too, once, with the update where it gets there.
TEST(Train, StepScheduleSpentEarlyInTheTimeBudgetIsNamed) {
  const std::string dir = test::temp_dir("step_spent");
  Config c = tiny_config(dir);
  c.train.epochs = 100000;
  c.train.max_minutes = 0.04;  // 2.4 seconds: the warning needs a budget of more than 14 updates
  c.train.valid_every = 2;
  c.train.lr = 0.008;
  c.train.lr_schedule.type = "step";
  c.train.lr_schedule.start = 2;
  c.train.lr_schedule.every = 1;  // halved after updates 2, 3, ..., 7: 1/64 of the rate (1.25e-4) after update 7
  validate(c);
  const TrainResult r = train(c, {}, torch::kCPU);
  ASSERT_EQ(r.ended_by, "max_minutes");
  ASSERT_GE(r.validations.size(), 2u);
  const std::string log = test::read_file(dir + "/train.log");
  const std::string warning = "train.lr_schedule brings the rate down to 0.000125 (train.lr 0.008) by update 7, but at this pace";
  const size_t at = log.find(warning);
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_EQ(log.find("brings the rate down", at + warning.size()), std::string::npos) << "said more than once";
  EXPECT_EQ(log.find("would never reduce"), std::string::npos) << log;
}

// lr_schedule.warmup: update k of the first w runs at lr * k / w, in the optimizer itself (what the updates use), then
// at lr; the rates depend on the update count alone, so a run stopped inside the warm-up and resumed logs the same
// rates and the same losses as the straight one.
TEST(Train, WarmupRaisesTheRateLinearlyAndResumesInsideIt) {
  torch::manual_seed(3);
  Seq2Seq model(tiny_config(test::temp_dir("warmup_unit")).model, 30, 30);
  TrainConfig tc;
  tc.lr = 0.008;
  tc.lr_schedule.warmup = 4;
  Trainer trainer(model, tc, torch::kCPU);
  std::vector<EncodedPair> data = {{{4, 5, 6}, {7, 8}}, {{9, 10}, {11, 12, 13}}};
  const Batch batch = make_batch(data, {0, 1});
  auto optimizer_lr = [&] {
    return static_cast<torch::optim::AdamOptions&>(trainer.optimizer().param_groups().at(0).options()).lr();
  };
  const std::vector<double> want = {0.002, 0.004, 0.006, 0.008, 0.008, 0.008};
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_DOUBLE_EQ(optimizer_lr(), want[k]) << "before update " << k + 1;
    EXPECT_DOUBLE_EQ(trainer.current_lr(), want[k]) << "before update " << k + 1;
    trainer.step(&batch, batch.tgt_tokens);
  }

  const auto config = [](const std::string& dir) {
    Config c = tiny_config(dir);
    c.train.lr = 0.008;
    c.train.valid_every = 2;
    c.train.lr_schedule.warmup = 6;
    validate(c);
    return c;
  };
  const auto t = test::train_straight_and_resumed("warmup_lr", config, 2, 10);
  ASSERT_EQ(t.straight.size(), 5u);  // validations at updates 2, 4, 6, 8, 10; "lr" is the next update's rate
  const std::vector<double> logged = {0.004, 0.008 * 5 / 6, 0.008, 0.008, 0.008};
  for (size_t i = 0; i < logged.size(); ++i)
    EXPECT_DOUBLE_EQ(t.straight[i]["lr"].get<double>(), logged[i]) << "at validation " << i;
  test::expect_same_trajectory(t, 4, {"train_loss", "valid_loss", "lr"});
}

TEST(Train, TokenBatchesAreDeterministicAndResumeExactly) {
  std::string a = test::temp_dir("tok_a"), b = test::temp_dir("tok_b"), split = test::temp_dir("tok_split");
  auto config = [](const std::string& dir, int steps) {
    Config c = tiny_config(dir);
    c.train.batch_size = Config().train.batch_size;  // exclusive with batch_tokens
    c.train.batch_tokens = 120;
    c.train.max_steps = steps;
    validate(c);
    return c;
  };
  train(config(a, 14), {}, torch::kCPU);
  train(config(b, 14), {}, torch::kCPU);
  train(config(split, 8), {}, torch::kCPU);  // stopped at a validation step, as a resumable run is
  TrainOptions resume;
  resume.resume = true;
  EXPECT_EQ(train(config(split, 14), resume, torch::kCPU).state.step, 14);
  auto ma = metrics(a), mb = metrics(b), ms = metrics(split);
  ASSERT_GE(ma.size(), 2u);
  ASSERT_EQ(mb.size(), ma.size());
  ASSERT_EQ(ms.size(), ma.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["step"], mb[i]["step"]);
    EXPECT_EQ(ma[i]["step"], ms[i]["step"]);
    EXPECT_EQ(ma[i]["train_loss"], mb[i]["train_loss"]) << "same seed, validation " << i;
    EXPECT_DOUBLE_EQ(ma[i]["train_loss"].get<double>(), ms[i]["train_loss"].get<double>()) << "resumed, validation " << i;
    EXPECT_DOUBLE_EQ(ma[i]["valid_loss"].get<double>(), ms[i]["valid_loss"].get<double>()) << "resumed, validation " << i;
  }
  // Both limits at once is refused.
  Config both = tiny_config(a);
  both.train.batch_tokens = 100;
  both.train.batch_size = 7;
  EXPECT_THROW(validate(both), UsageError);
}

TEST(Train, RunDirProtectedAndResumeNeedsCheckpoint) {
  std::string dir = test::temp_dir("train_protect");
  Config c = tiny_config(dir);
  c.train.max_steps = 2;
  TrainOptions resume;
  resume.resume = true;
  EXPECT_THROW(train(c, resume, torch::kCPU), UsageError);  // nothing to resume
  train(c, {}, torch::kCPU);
  EXPECT_THROW(train(c, {}, torch::kCPU), UsageError);  // already holds a run
  TrainOptions overwrite;
  overwrite.overwrite = true;
  EXPECT_NO_THROW(train(c, overwrite, torch::kCPU));
  Config other = c;
  other.model.hidden_dim = 20;
  EXPECT_THROW(train(other, resume, torch::kCPU), UsageError);  // different model
}

TEST(Train, TruncatedCheckpointGivesClearError) {
  std::string dir = test::temp_dir("train_trunc");
  Config c = tiny_config(dir);
  c.train.max_steps = 2;
  train(c, {}, torch::kCPU);
  std::string data = test::read_file(dir + "/last.pt");
  ASSERT_GT(data.size(), 100u);
  test::write_file(dir + "/last.pt", data.substr(0, data.size() / 2));
  Seq2Seq model(c.model, Vocab::load(dir + "/src.vocab").size(), Vocab::load(dir + "/tgt.vocab").size());
  try {
    load_checkpoint(dir + "/last.pt", model, nullptr);
    FAIL() << "truncated checkpoint loaded";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load checkpoint"), std::string::npos) << e.what();
  }
  // best.pt, written separately, still loads.
  EXPECT_NO_THROW(load_checkpoint(dir + "/best.pt", model, nullptr));
}

// The first line of a UsageError that load_checkpoint throws, or "" when it loads.
std::string checkpoint_error(const std::string& path, Seq2Seq& model) {
  try {
    load_checkpoint(path, model, nullptr);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

TEST(Checkpoint, RecordsFormatAndModelTypeAndRefusesAnother) {
  std::string dir = test::temp_dir("ckpt_type");
  Config c = tiny_config(dir);
  Seq2Seq bahdanau(c.model, 20, 30);
  save_checkpoint(dir + "/b.pt", bahdanau, nullptr, TrainerState{});
  torch::serialize::InputArchive ar;
  ar.load_from(dir + "/b.pt");
  torch::Tensor version;
  ASSERT_TRUE(ar.try_read("format_version", version));
  EXPECT_EQ(version.item<int64_t>(), kCheckpointFormat);
  c10::IValue type;
  ASSERT_TRUE(ar.try_read("model_type", type));
  EXPECT_EQ(type.toStringRef(), "gru/bahdanau");
  // Same vocabularies and sizes, another attention: the type check names both before any shape is compared.
  ModelConfig luong = c.model;
  luong.attention.type = AttentionType::kLuong;
  luong.attention.score = LuongScore::kDot;
  Seq2Seq other(luong, 20, 30);
  const std::string msg = checkpoint_error(dir + "/b.pt", other);
  EXPECT_NE(msg.find("holds a gru/bahdanau model, the config gives gru/luong-dot"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  Seq2Seq same(c.model, 20, 30);
  EXPECT_EQ(checkpoint_error(dir + "/b.pt", same), "");
}

TEST(Checkpoint, RefusesANewerFormatAndReadsTheUnversionedOne) {
  std::string dir = test::temp_dir("ckpt_format");
  Config c = tiny_config(dir);
  Seq2Seq model(c.model, 20, 30);
  auto write = [&](const std::string& path, int64_t version) {  // the layout of format 1, plus a version when > 0
    torch::serialize::OutputArchive ar, m;
    if (version > 0) ar.write("format_version", torch::tensor({version}, torch::kLong));
    model->save(m);
    ar.write("model", m);
    for (const char* k : {"step", "epoch", "batch_in_epoch", "has_best", "bad_validations", "plateau_bad", "finished"})
      ar.write(k, torch::tensor({int64_t{7}}, torch::kLong));
    for (const char* k : {"best_metric", "lr", "elapsed_s"}) ar.write(k, torch::tensor({0.5}, torch::kDouble));
    ar.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
    ar.save_to(path);
  };
  write(dir + "/v1.pt", 0);
  Seq2Seq fresh(c.model, 20, 30);
  EXPECT_EQ(checkpoint_error(dir + "/v1.pt", fresh), "");
  EXPECT_EQ(load_checkpoint(dir + "/v1.pt", fresh, nullptr).step, 7);
  write(dir + "/future.pt", kCheckpointFormat + 1);
  const std::string msg = checkpoint_error(dir + "/future.pt", fresh);
  EXPECT_NE(msg.find("checkpoint format " + std::to_string(kCheckpointFormat + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("formats 1 to " + std::to_string(kCheckpointFormat)), std::string::npos) << msg;
}

TEST(Train, CliExitCodes) {
  auto r = test::run_cli("train --config /nonexistent.json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent.json"), std::string::npos) << r.output;
  r = test::run_cli("train --config " + test::source_dir() + "/configs/bahdanau.json --set model.attention.type=bogus");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.attention.type"), std::string::npos) << r.output;
  r = test::run_cli("train --bogus-flag");
  EXPECT_EQ(r.code, 2) << r.output;
  r = test::run_cli("--help");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* sub : {"train", "evaluate", "translate", "attention", "bleu", "corpus", "compare", "bench"}) {
    r = test::run_cli(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub << ": " << r.output;
  }
}

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
// Writes a config JSON for the tiny corpus and returns its path.
std::string write_tiny_config(const std::string& dir, const std::string& run_dir, int epochs) {
  Config c = tiny_config(run_dir);
  c.train.epochs = epochs;
  c.train.valid_every = 0;
  c.train.log_every = 1;
  std::string path = dir + "/config.json";
  test::write_file(path, config_to_json(c).dump(2));
  return path;
}
}  // namespace

TEST(Train, SigintWritesLastCheckpointAndResumeContinues) {
  std::string dir = test::temp_dir("train_sigint");
  std::string run = dir + "/run";
  std::string cfg = write_tiny_config(dir, run, 100000);  // would run for a very long time
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(ATTNMT_BIN, ATTNMT_BIN, "--device", "cpu", "train", "--config", cfg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training steps are being logged (the handlers are installed by then).
  bool started = false;
  for (int i = 0; i < 2400 && !started; ++i) {  // up to 2 minutes: a CUDA build loads its libraries first
    usleep(50000);
    started = test::read_file(run + "/train.log").find(" step ") != std::string::npos;
  }
  ASSERT_TRUE(started) << "training never started";
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  ASSERT_TRUE(std::filesystem::exists(run + "/last.pt"));
  Config c = config_from_json(read_json_file(run + "/config.json"));
  Seq2Seq model(c.model, Vocab::load(run + "/src.vocab").size(), Vocab::load(run + "/tgt.vocab").size());
  TrainerState st = load_checkpoint(run + "/last.pt", model, nullptr);
  EXPECT_GT(st.step, 0);
  EXPECT_FALSE(st.finished);
  auto r = test::run_cli("train --config " + cfg + " --resume --set train.max_steps=" + std::to_string(st.step + 3));
  ASSERT_EQ(r.code, 0) << r.output;
  TrainerState after = load_checkpoint(run + "/last.pt", model, nullptr);
  EXPECT_EQ(after.step, st.step + 3);
}

TEST(Train, NanLossStopsWithClearError) {
  std::string dir = test::temp_dir("train_nan");
  Config c = tiny_config(dir + "/run");
  c.train.max_steps = 10;
  TrainOptions opt;
  opt.test_nan_at_step = 6;
  try {
    train(c, opt, torch::kCPU);
    FAIL() << "NaN loss not detected";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("NaN at step 6"), std::string::npos) << m;
    EXPECT_NE(m.find("last.pt"), std::string::npos) << m;  // validated at step 4: a good checkpoint exists
  }
}

// Where the kernel does not run (a GPU's tensors; every tensor under --kernels reference), adam_step is LibTorch's Adam
// made of multi-tensor operations: the same numbers to the last bit, in eight dispatched operations a group (nine with
// weight decay) however many parameters it holds, where LibTorch's loop dispatches eight for each.
TEST(Train, MultiTensorAdamEqualsLibTorchAdamInAFewOperations) {
  const ScopedKernelMode mode(KernelMode::kReference);
  for (double wd : {0.0, 0.01}) {
    torch::manual_seed(12);
    std::vector<torch::Tensor> a = {torch::randn({30, 70}), torch::randn({17}), torch::randn({5, 3}), torch::randn({4})};
    std::vector<torch::Tensor> b;
    for (auto& t : a) {
      t.requires_grad_(true);
      b.push_back(t.detach().clone().requires_grad_(true));
    }
    const auto opts = torch::optim::AdamOptions(3e-3).weight_decay(wd);
    torch::optim::Adam ours(a, opts), ref(b, opts);
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        const torch::Tensor g = torch::randn(a[i].sizes()) * static_cast<double>(i + 1);
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      int64_t ops = 0;
      {
        DispatchCounter counter;
        adam_step(ours);
        ops = counter.count().dispatched_ops;
      }
      ref.step();
      // the first step also makes each parameter's two moments (zeros_like)
      EXPECT_EQ(ops, (wd == 0 ? 8 : 9) + (step == 1 ? 2 * static_cast<int64_t>(a.size()) : 0)) << "step " << step;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].sizes(), b[i].sizes());
        EXPECT_TRUE(torch::equal(a[i], b[i])) << "wd " << wd << " step " << step << " param " << i;
      }
    }
    ASSERT_EQ(ours.state().size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const auto& st = static_cast<const torch::optim::AdamParamState&>(*ours.state().at(optimizer_state_key(ours.state(), a[i])));
      const auto& rs = static_cast<const torch::optim::AdamParamState&>(*ref.state().at(optimizer_state_key(ref.state(), b[i])));
      EXPECT_EQ(st.step(), 3);
      EXPECT_TRUE(torch::equal(st.exp_avg(), rs.exp_avg()));
      EXPECT_TRUE(torch::equal(st.exp_avg_sq(), rs.exp_avg_sq()));
    }
  }
}

// adam_step is LibTorch's Adam update in one pass: the same parameters and moments as torch::optim::Adam::step
// (to float rounding: ATen fuses some multiply-adds) over several steps, for every lane count this CPU can run,
// with and without weight decay, on parameters large enough to be shared between threads and on small ones; the
// state it keeps is the one LibTorch's step reads (a LibTorch step after fused ones continues the same trajectory).
TEST(Train, FusedAdamStepEqualsLibTorchAdam) {
  for (int cap : {4, 8, 16})
  for (double wd : {0.0, 0.01}) {
    torch::manual_seed(11);
    std::vector<torch::Tensor> a = {torch::randn({300, 700}), torch::randn({17}), torch::randn({5, 3})};
    std::vector<torch::Tensor> b;
    for (auto& t : a) {
      t.requires_grad_(true);
      b.push_back(t.detach().clone().requires_grad_(true));
    }
    const auto opts = torch::optim::AdamOptions(3e-3).weight_decay(wd);
    torch::optim::Adam ours(a, opts), ref(b, opts);
    for (int step = 1; step <= 6; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        const torch::Tensor g = torch::randn(a[i].sizes()) * static_cast<double>(i + 1);
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      if (step <= 4) adam_step(ours, cap);
      else ours.step();  // LibTorch's own step on the state the fused ones left
      ref.step();
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].sizes(), b[i].sizes());
        EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 2e-6) << "wd " << wd << " step " << step << " param " << i << " lanes " << cap;
        EXPECT_FALSE(torch::equal(a[i], a[i].detach().clone().zero_())) << "parameters moved";
      }
    }
    ASSERT_EQ(ours.state().size(), ref.state().size());
    for (size_t i = 0; i < a.size(); ++i) {
      const auto& st = static_cast<const torch::optim::AdamParamState&>(*ours.state().at(optimizer_state_key(ours.state(), a[i])));
      const auto& rs = static_cast<const torch::optim::AdamParamState&>(*ref.state().at(optimizer_state_key(ref.state(), b[i])));
      EXPECT_EQ(st.step(), 6);
      EXPECT_LT((st.exp_avg() - rs.exp_avg()).abs().max().item<double>(), 1e-6);
      EXPECT_LT((st.exp_avg_sq() - rs.exp_avg_sq()).abs().max().item<double>(), 1e-5);
    }
  }
  // The update counts as an in-place change: a packed copy of the weight (decoding's) is refreshed.
  {
    torch::Tensor w = torch::randn({40, 8}).requires_grad_(true), x = torch::randn({3, 8});
    torch::optim::Adam opt({w}, torch::optim::AdamOptions(1e-1));
    PackedLinear packed;
    torch::NoGradGuard ng;
    const torch::Tensor before = packed(x, w, torch::Tensor());
    w.mutable_grad() = torch::ones({40, 8});
    adam_step(opt);
    const torch::Tensor after = packed(x, w, torch::Tensor());
    ASSERT_EQ(after.sizes(), before.sizes());
    EXPECT_LT((after - torch::mm(x, w.t())).abs().max().item<double>(), 1e-4);
    EXPECT_GT((after - before).abs().max().item<double>(), 0.1);
  }
  // A parameter without a gradient is left alone, as LibTorch's step does; double parameters take its step.
  torch::Tensor p = torch::randn({4}).requires_grad_(true), q = torch::randn({4}, torch::kDouble).requires_grad_(true);
  const torch::Tensor p0 = p.detach().clone();
  torch::optim::Adam none({p}, torch::optim::AdamOptions(1e-2));
  adam_step(none);
  EXPECT_TRUE(torch::equal(p.detach(), p0));
  EXPECT_TRUE(none.state().empty());
  torch::optim::Adam dbl({q}, torch::optim::AdamOptions(1e-2));
  q.mutable_grad() = torch::ones({4}, torch::kDouble);
  const torch::Tensor q0 = q.detach().clone();
  adam_step(dbl);
  EXPECT_LT((q.detach() - (q0 - 1e-2)).abs().max().item<double>(), 1e-9);  // first Adam step: lr * sign(g)
}

TEST(Train, SequenceLossMatchesStockCrossEntropy) {
  torch::manual_seed(3);
  for (double eps : {0.0, 0.1, 0.3}) {
    torch::Tensor logits = (torch::randn({3, 5, 11}, torch::kDouble) * 3).requires_grad_(true);
    torch::Tensor target = torch::randint(4, 11, {3, 5}, torch::kLong);
    target[0][4] = Vocab::kPad;  // padding rows contribute nothing
    target[2][3] = Vocab::kPad;
    target[2][4] = Vocab::kPad;
    torch::Tensor ours = sequence_loss(logits, target, eps);
    torch::Tensor g_ours = torch::autograd::grad({ours}, {logits})[0];
    namespace F = torch::nn::functional;
    torch::Tensor ref = F::cross_entropy(logits.reshape({-1, 11}), target.reshape(-1),
                                         F::CrossEntropyFuncOptions().ignore_index(Vocab::kPad).reduction(torch::kSum).label_smoothing(eps));
    torch::Tensor g_ref = torch::autograd::grad({ref}, {logits})[0];
    EXPECT_NEAR(ours.item<double>(), ref.item<double>(), 1e-10) << "eps " << eps;
    ASSERT_EQ(g_ours.sizes(), g_ref.sizes());
    EXPECT_LT((g_ours - g_ref).abs().max().item<double>(), 1e-10) << "eps " << eps;
    EXPECT_EQ(g_ours[0][4].abs().sum().item<double>(), 0.0);  // a <pad> target gets no gradient
    EXPECT_GT(g_ours[0][3].abs().sum().item<double>(), 0.0);
    // Float logits take the row kernels (kernels/packed_product.h): the same loss and gradient to float precision.
    torch::Tensor lf = logits.detach().to(torch::kFloat).requires_grad_(true);
    torch::Tensor ours_f = sequence_loss(lf, target, eps);
    torch::Tensor g_f = torch::autograd::grad({ours_f * 0.5}, {lf})[0];
    EXPECT_NEAR(ours_f.item<double>(), ref.item<double>(), 1e-4 * std::abs(ref.item<double>())) << "eps " << eps;
    ASSERT_EQ(g_f.sizes(), g_ref.sizes());
    EXPECT_LT((g_f.to(torch::kDouble) - 0.5 * g_ref).abs().max().item<double>(), 1e-6) << "eps " << eps;
    EXPECT_EQ(g_f[0][4].abs().sum().item<float>(), 0.0f);
  }
}

// batch_loss runs the readout and the output layer over the real target positions only: the logits are
// those of the padded forward at the true cells of the target mask, in row order, and loss and every
// parameter's gradient are the padded forward's (in double, without dropout), for each decoder path.
TEST(Train, BatchLossOverRealPositionsEqualsThePaddedLoss) {
  const int64_t V = 20;
  torch::manual_seed(4);
  std::vector<EncodedPair> data;
  for (int64_t s : {5, 2, 4, 3}) {  // targets of 1, 4, 6, 5 tokens: padding in all rows but one
    const int64_t t = s == 5 ? 1 : s + 2;
    auto rs = torch::randint(4, V, {s}, torch::kLong), rt = torch::randint(4, V, {t}, torch::kLong);
    data.push_back({std::vector<int64_t>(rs.data_ptr<int64_t>(), rs.data_ptr<int64_t>() + s),
                    std::vector<int64_t>(rt.data_ptr<int64_t>(), rt.data_ptr<int64_t>() + t)});
  }
  const Batch b = make_batch(data, {0, 1, 2, 3});
  ASSERT_EQ(b.tgt_tokens, 2 + 5 + 7 + 6);  // with <eos>
  ASSERT_LT(b.tgt_tokens, b.tgt_out.numel());
  int checked = 0;
  // The decoder's paths: whole-sequence GRU (none), fused recurrence (bahdanau), stepped recurrence
  // (bahdanau+lstm), whole-sequence attention (luong, scaled_dot), token by token (luong+feed).
  for (const std::string type : {"none", "bahdanau", "bahdanau+lstm", "luong", "luong+feed", "scaled_dot"}) {
    ModelConfig m = test::tiny_config_for(tiny_corpus(), "unused", type.substr(0, type.find('+'))).model;
    m.dropout = 0;
    m.input_feeding = type == "luong+feed";
    if (type == "bahdanau+lstm") m.rnn = RnnCell::kLstm;
    torch::manual_seed(0);
    Seq2Seq model(m, V, V);
    model->to(torch::kDouble);
    for (double eps : {0.0, 0.1}) {
      auto run = [&](bool packed) {
        model->zero_grad();
        torch::Tensor loss, logits;
        if (packed) {
          const BatchLoss bl = batch_loss(model, b, eps);
          loss = bl.sum;
          logits = bl.out.logits;
        } else {
          logits = model->forward(b.src, b.src_len, b.src_mask, b.tgt_in).logits;
          loss = sequence_loss(logits, b.tgt_out, eps);
        }
        loss.backward();
        std::vector<torch::Tensor> r = {loss.detach(), logits.detach()};
        for (const auto& p : model->parameters()) r.push_back(p.grad().clone());
        return r;
      };
      const auto packed = run(true), padded = run(false);
      ASSERT_EQ(packed.size(), padded.size());
      ASSERT_EQ(packed[1].sizes(), (std::vector<int64_t>{b.tgt_tokens, V})) << type;
      ASSERT_EQ(padded[1].sizes(), (std::vector<int64_t>{4, b.tgt_out.size(1), V})) << type;
      const torch::Tensor at_real = padded[1].masked_select(b.tgt_mask.unsqueeze(-1)).view({-1, V});
      EXPECT_TRUE(torch::allclose(packed[1], at_real, 1e-12, 1e-12)) << type;
      EXPECT_NEAR(packed[0].item<double>(), padded[0].item<double>(), 1e-10) << type << " eps " << eps;
      for (size_t i = 2; i < packed.size(); ++i)
        EXPECT_TRUE(torch::allclose(packed[i], padded[i], 1e-9, 1e-11))
            << type << " eps " << eps << " parameter " << i - 2 << " max diff " << (packed[i] - padded[i]).abs().max().item<double>();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

// Attention snapshots: one file per validation, rows that are distributions over the source, a page that
// shows every snapshot; taking them leaves the training trajectory as it is; a model without attention
// gets a page that says so.
TEST(Snapshots, OnePerValidationRowsSumToOneAndThePageShowsThemAll) {
  Config c = tiny_config(test::temp_dir("snap_on"));
  c.train.max_steps = 12;
  c.train.snapshot_sentences = 2;
  validate(c);
  train(c, {}, torch::kCPU);
  const RunDir dir(c.run_dir);
  const auto files = dir.progress_snapshots();
  const auto m = metrics(c.run_dir);
  ASSERT_GE(m.size(), 3u);  // every 4 steps and at each epoch end
  ASSERT_EQ(files.size(), m.size());
  const std::string page = test::read_file(dir.progress_index());
  for (size_t i = 0; i < files.size(); ++i) {
    auto j = read_json_file(files[i]);
    EXPECT_EQ(j.at("step").get<int64_t>(), m[i].at("step").get<int64_t>());
    EXPECT_EQ(files[i], dir.progress_snapshot(m[i].at("step").get<int64_t>()));
    const auto& sentences = j.at("sentences");
    ASSERT_EQ(sentences.size(), 2u);
    for (const auto& s : sentences) {
      const auto w = s.at("weights").get<std::vector<std::vector<double>>>();
      ASSERT_EQ(w.size(), s.at("tgt_tokens").size());
      for (const auto& row : w) {
        ASSERT_EQ(row.size(), s.at("src_tokens").size());
        double sum = 0;
        for (double x : row) sum += x;
        EXPECT_NEAR(sum, 1.0, 1e-4);
      }
    }
    // Every snapshot is on the page, once per sentence.
    const std::string marker = "data-step=\"" + std::to_string(j.at("step").get<int64_t>()) + "\"";
    size_t count = 0;
    for (size_t p = page.find(marker); p != std::string::npos; p = page.find(marker, p + 1)) ++count;
    EXPECT_EQ(count, 2u) << marker;
  }
  EXPECT_EQ(page.find("<script src"), std::string::npos);  // no external script
  EXPECT_NE(page.find("type=\"range\""), std::string::npos);

  // The same run without snapshots follows the same trajectory.
  Config off = c;
  off.run_dir = test::temp_dir("snap_off");
  off.train.snapshot_sentences = 0;
  train(off, {}, torch::kCPU);
  const auto m_off = metrics(off.run_dir);
  ASSERT_EQ(m_off.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m_off[i]["valid_loss"], m[i]["valid_loss"]);
  EXPECT_TRUE(RunDir(off.run_dir).progress_snapshots().empty());

  Config none = tiny_config(test::temp_dir("snap_none"), "none");
  none.train.max_steps = 4;
  train(none, {}, torch::kCPU);
  EXPECT_TRUE(RunDir(none.run_dir).progress_snapshots().empty());
  EXPECT_NE(test::read_file(RunDir(none.run_dir).progress_index()).find("no attention"), std::string::npos);
}

// train.json's whole-run figures: one epoch trains on every target token once (<eos> included, padding not); a run
// stopped and resumed counts what a straight run counts; training time excludes validation.
TEST(Train, TheRunSummaryCountsTheWholeRunAcrossResumes) {
  int64_t corpus_tokens = 0;
  {
    std::ifstream in(tiny_corpus() + "/train.fr");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string w;
      while (words >> w) ++corpus_tokens;
      ++corpus_tokens;  // <eos>
    }
  }
  ASSERT_GT(corpus_tokens, 96);
  const std::string one = test::temp_dir("train_summary_epoch");
  Config c = tiny_config(one);
  c.train.epochs = 1;
  train(c, {}, torch::kCPU);
  const auto e = RunDir(one).read_train_summary();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->target_tokens, corpus_tokens);
  EXPECT_GT(e->valid_s, 0.0);
  EXPECT_GT(e->train_s(), 0.0);
  EXPECT_NEAR(e->train_s() + e->valid_s, e->elapsed_s, 1e-9);
  EXPECT_NEAR(e->tokens_per_s(), static_cast<double>(corpus_tokens) / e->train_s(), 1e-6);
  EXPECT_GT(e->peak_rss_mb, 10.0);
  EXPECT_NE(test::read_file(one + "/train.log").find("whole run: " + std::to_string(corpus_tokens) + " target tokens"),
            std::string::npos);

  const std::string straight = test::temp_dir("train_summary_straight"), resumed = test::temp_dir("train_summary_resumed");
  Config a = tiny_config(straight), b = tiny_config(resumed);
  a.train.max_steps = 10;
  b.train.max_steps = 4;  // a validation step (valid_every 4): resumable from last.pt
  train(a, {}, torch::kCPU);
  train(b, {}, torch::kCPU);
  const auto half = RunDir(resumed).read_train_summary();
  ASSERT_TRUE(half.has_value());
  b.train.max_steps = 10;
  TrainOptions resume;
  resume.resume = true;
  train(b, resume, torch::kCPU);
  const auto sa = RunDir(straight).read_train_summary(), sb = RunDir(resumed).read_train_summary();
  ASSERT_TRUE(sa.has_value());
  ASSERT_TRUE(sb.has_value());
  EXPECT_EQ(sb->step, 10);
  EXPECT_GT(sa->target_tokens, half->target_tokens);
  EXPECT_EQ(sb->target_tokens, sa->target_tokens);
  EXPECT_GT(sb->valid_s, half->valid_s);  // the first process's validations are kept
  EXPECT_GE(sb->elapsed_s, half->elapsed_s);
}

// Every run says what ended it, in the log and in train.json (what `compare` and the lab report): each limit in turn.
TEST(Train, TheRunSaysWhichLimitEndedIt) {
  struct Case {
    std::string name;
    std::function<void(Config&)> set;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"steps", [](Config& c) { c.train.max_steps = 5; }, "max_steps"},
      {"epochs", [](Config& c) { c.train.epochs = 1; }, "epochs"},
      // patience 1 with validations every step: the second validation that does not beat the first ends it
      {"early", [](Config& c) { c.train.epochs = 50; c.train.valid_every = 1; c.train.lr = 1e-9; c.train.early_stopping.patience = 1;
                                c.model.dropout = 0; c.train.teacher_forcing = 1; }, "early stopping"},
      {"minutes", [](Config& c) { c.train.epochs = 1000; c.train.max_minutes = 1e-4; }, "max_minutes"}};
  std::string steps_dir;
  for (const auto& k : cases) {
    const std::string dir = test::temp_dir("train_ended_" + k.name);
    if (k.name == "steps") steps_dir = dir;
    Config c = tiny_config(dir);
    k.set(c);
    validate(c);
    const TrainResult r = train(c, {}, torch::kCPU);
    EXPECT_EQ(r.ended_by, k.want) << k.name;
    const auto ts = RunDir(dir).read_train_summary();
    ASSERT_TRUE(ts.has_value()) << k.name;
    EXPECT_EQ(ts->ended_by, k.want) << k.name;
    EXPECT_EQ(ts->step, r.state.step) << k.name;
    EXPECT_NE(test::read_file(dir + "/train.log").find("ended by " + k.want), std::string::npos) << k.name;
  }
  // A resumed run drops the old summary and writes its own.
  const std::string dir = steps_dir;
  Config c = tiny_config(dir);
  c.train.max_steps = 7;
  TrainOptions resume;
  resume.resume = true;
  EXPECT_EQ(train(c, resume, torch::kCPU).ended_by, "max_steps");
  ASSERT_TRUE(RunDir(dir).read_train_summary().has_value());
  EXPECT_EQ(RunDir(dir).read_train_summary()->step, 7);
}
