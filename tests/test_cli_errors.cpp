// The bad-input catalogue: every subcommand fed broken configs, corpora, vocabularies, alignments,
// checkpoints, run directories and flags. Each case must exit with the expected code (2 for bad input,
// 1 for a runtime failure), print exactly one error line that names the culprit, and leave every file
// under the working directory exactly as it was (no partial outputs, no rewritten run files).
// The README's troubleshooting section lists the same catalogue.
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include "common/runtime.h"
#include "support.h"

namespace attnmt::test {
namespace {

namespace fs = std::filesystem;

struct BadInput {
  std::string name;    // what is wrong
  std::string args;    // attnmt arguments; {W} is replaced by the work directory
  int code;            // expected exit code
  std::string expect;  // the error line must contain this (the file, key, line or flag at fault)
};

// Every regular file under dir with its size and modification time; a run directory's lock file (.lock, rewritten by
// each writer that takes the lock, with its pid) is left out.
std::map<std::string, std::pair<uintmax_t, int64_t>> snapshot(const std::string& dir) {
  std::map<std::string, std::pair<uintmax_t, int64_t>> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename() == ".lock") continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    files[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, mtime};
  }
  return files;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  std::string l;
  while (std::getline(in, l))
    if (l.find("[error]") != std::string::npos || l.rfind("attnmt: error:", 0) == 0) lines.push_back(l);
  return lines;
}

void run_catalogue(const std::string& work, const std::vector<BadInput>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto before = snapshot(work);
    CliResult r = run_cli(replace_all(c.args, "{W}", work));
    EXPECT_EQ(r.code, c.code) << r.output;
    auto errors = error_lines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_NE(errors[0].find(replace_all(c.expect, "{W}", work)), std::string::npos)
        << "error line: " << errors[0] << "\nexpected to contain: " << c.expect;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
    auto after = snapshot(work);
    ASSERT_EQ(after.size(), before.size()) << "files appeared or vanished";
    EXPECT_EQ(after, before) << "a file changed";
  }
}

// A work directory with a tiny corpus, a valid config and (optionally) a trained tiny run in {W}/run.
std::string make_work(const std::string& name, bool trained) {
  std::string corpus = tiny_toy_corpus(name, 48, 6, 6, 12);
  Config c = tiny_config_for(corpus, corpus + "/run", "bahdanau");
  c.train.max_steps = 2;
  c.train.batch_size = 16;
  write_file(corpus + "/good.json", config_to_json(c).dump(2));
  if (trained) {
    CliResult r = run_cli("--log-level warn train -c " + corpus + "/good.json");
    EXPECT_EQ(r.code, 0) << r.output;
  }
  return corpus;
}

TEST(BadInputCatalogue, Configs) {
  std::string w = make_work("cat_cfg", false);
  write_file(w + "/malformed.json", "{\"model\": {\"hidden_dim\": 16,}");
  write_file(w + "/empty.json", "");
  write_file(w + "/array.json", "[1, 2]");
  std::string good = read_file(w + "/good.json");
  write_file(w + "/unknown_key.json", replace_all(good, "\"hidden_dim\"", "\"hiden_dim\""));
  write_file(w + "/wrong_type.json", replace_all(good, "\"hidden_dim\": 16", "\"hidden_dim\": \"sixteen\""));
  write_file(w + "/duplicated.json", replace_all(good, "\"hidden_dim\": 16", "\"hidden_dim\": 16, \"hidden_dim\": 32"));
  write_file(w + "/binary.json", std::string("\x00\x01\xff\xfe garbage", 12));
  run_catalogue(w, {
      {"config file missing", "train -c {W}/nope.json", 2, "{W}/nope.json"},
      {"config is a directory", "train -c {W}", 2, "{W}"},
      {"malformed JSON", "train -c {W}/malformed.json", 2, "malformed.json: invalid JSON"},
      {"empty config", "train -c {W}/empty.json", 2, "empty.json"},
      {"binary garbage as config", "train -c {W}/binary.json", 2, "binary.json"},
      {"top level not an object", "train -c {W}/array.json", 2, "array.json"},
      {"unknown key", "train -c {W}/unknown_key.json", 2, "hiden_dim"},
      {"wrong type", "train -c {W}/wrong_type.json", 2, "model.hidden_dim"},
      {"duplicated key", "train -c {W}/duplicated.json", 2, "duplicated key model.hidden_dim"},
      {"out of range", "train -c {W}/good.json --set model.hidden_dim=0", 2, "model.hidden_dim"},
      {"negative learning rate", "train -c {W}/good.json --set train.lr=-1", 2, "train.lr"},
      {"unknown attention type", "train -c {W}/good.json --set model.attention.type=magic", 2, "model.attention.type"},
      {"contradictory: heads on additive attention", "train -c {W}/good.json --set model.attention.heads=4", 2,
       "heads"},
      {"--set without '='", "train -c {W}/good.json --set model.hidden_dim", 2, "--set"},
      {"--set on a non-object", "train -c {W}/good.json --set model.hidden_dim.x=3", 2, "model.hidden_dim"},
      {"evaluate config key out of range", "train -c {W}/good.json --set eval.beam_size=0", 2, "eval.beam_size"},
      {"unknown encoder type", "train -c {W}/good.json --set model.encoder.type=transformer", 2, "model.encoder.type"},
      {"self-attention decoder with additive cross-attention", "train -c {W}/good.json --set model.decoder.type=self_attention",
       2, "model.attention.type"},
      {"causal mask off on an RNN decoder", "train -c {W}/good.json --set model.decoder.causal_mask=false", 2,
       "model.decoder.causal_mask"},
      {"self-attention heads not dividing hidden_dim",
       "train -c {W}/good.json --set model.encoder.type=self_attention --set model.encoder.heads=3", 2, "model.encoder.heads"},
  });
}

TEST(BadInputCatalogue, Corpora) {
  std::string w = make_work("cat_corpus", false);
  std::string fr = read_file(w + "/train.fr");
  write_file(w + "/short.fr", fr.substr(0, fr.find('\n') + 1));
  std::string en = read_file(w + "/train.en");
  std::string bad_utf8 = en;
  bad_utf8.insert(en.find('\n') + 1, "caf\xc3 au lait ");  // truncated 2-byte sequence on line 2
  write_file(w + "/utf8.en", bad_utf8);
  std::string garbage;
  std::mt19937 rng(7);
  for (int i = 0; i < 4096; ++i) garbage.push_back(static_cast<char>(rng() & 0xff));
  write_file(w + "/garbage.en", garbage);
  std::string huge;
  while (huge.size() < (1u << 20)) huge += "word ";
  write_file(w + "/huge.en", huge + "\n");
  write_file(w + "/huge.fr", "b\n");
  write_file(w + "/blank.en", "\n\n\n");
  write_file(w + "/blank.fr", "\n\n\n");
  write_file(w + "/notab.tsv", "hello\tbonjour\nno tab here\n");
  auto set_train = [&](const std::string& src, const std::string& tgt) {
    return "train -c {W}/good.json --set data.train.src=" + src + " --set data.train.tgt=" + tgt;
  };
  run_catalogue(w, {
      {"training source missing", set_train("{W}/missing.en", "{W}/train.fr"), 2, "{W}/missing.en"},
      {"training source is a directory", set_train("{W}", "{W}/train.fr"), 2, "not a regular file: {W}"},
      {"training source is a device", set_train("/dev/zero", "{W}/train.fr"), 2, "not a regular file: /dev/zero"},
      {"line counts differ", set_train("{W}/train.en", "{W}/short.fr"), 2, "short.fr"},
      {"invalid UTF-8", set_train("{W}/utf8.en", "{W}/train.fr"), 2, "utf8.en:2"},
      {"binary garbage", set_train("{W}/garbage.en", "{W}/train.fr"), 2, "garbage.en"},
      {"a 1 MB single line (nothing left under max_len)", set_train("{W}/huge.en", "{W}/huge.fr"), 2, "no sentence pairs"},
      {"empty after filtering", set_train("{W}/blank.en", "{W}/blank.fr"), 2, "no sentence pairs"},
      {"TSV line without a tab",
       "train -c {W}/good.json --set data.train.src= --set data.train.tgt= --set data.train.tsv={W}/notab.tsv", 2,
       "notab.tsv:2"},
      {"bleu: hypothesis and reference line counts differ", "bleu --hyp {W}/short.fr --ref {W}/train.fr", 2, "short.fr"},
      {"bleu: invalid UTF-8 hypothesis", "bleu --hyp {W}/utf8.en --ref {W}/train.en", 2, "utf8.en:2"},
  });
}

TEST(BadInputCatalogue, SentencePiece) {
  std::string w = make_work("cat_spm", false);
  write_file(w + "/corrupt.model", "this is not a SentencePiece model\n");
  // a subword run whose model file was damaged afterwards
  CliResult r = run_cli("--log-level warn train -c " + w + "/good.json --set data.tokenizer=sentencepiece --set data.spm.vocab_size=60");
  ASSERT_EQ(r.code, 0) << r.output;
  write_file(w + "/run/src.spm.model", "garbage");
  write_file(w + "/one_line.src", "the cat sleeps\n");
  const std::string spm = "train -c {W}/good.json --set run_dir={W}/spm_run --set data.tokenizer=sentencepiece";
  run_catalogue(w, {
      {"more pieces than the corpus allows", spm + " --set data.spm.vocab_size=100000", 2, "data.spm.vocab_size"},
      {"user model file missing", spm + " --set data.spm.src_model={W}/missing.model --set data.spm.tgt_model={W}/missing.model", 2,
       "missing.model"},
      {"user model file corrupt", spm + " --set data.spm.src_model={W}/corrupt.model --set data.spm.tgt_model={W}/corrupt.model", 2,
       "corrupt.model"},
      {"source model without a target model", spm + " --set data.spm.src_model={W}/corrupt.model", 2, "data.spm"},
      {"model files with a word-level tokenizer",
       "train -c {W}/good.json --set data.spm.src_model={W}/corrupt.model --set data.spm.tgt_model={W}/corrupt.model", 2,
       "data.spm.src_model"},
      {"unknown piece algorithm", spm + " --set data.spm.model_type=wordpiece", 2, "data.spm.model_type"},
      {"run whose SentencePiece model is damaged", "translate -r {W}/run -i {W}/one_line.src", 2, "src.spm.model"},
  });
}

TEST(BadInputCatalogue, VocabulariesAlignmentsAndCheckpoints) {
  std::string w = make_work("cat_run", true);
  // Copies of the trained run, each broken in one way.
  auto copy_run = [&](const std::string& name) {
    fs::copy(w + "/run", w + "/" + name, fs::copy_options::recursive);
    return w + "/" + name;
  };
  std::string bad_vocab = copy_run("bad_vocab");
  write_file(bad_vocab + "/src.vocab", "<pad>\n<unk>\n<bos>\n<eos>\nword\nword\n");
  std::string truncated = copy_run("truncated");
  std::string ckpt = read_file(truncated + "/best.pt");
  write_file(truncated + "/best.pt", ckpt.substr(0, ckpt.size() / 2));
  std::string random_bytes = copy_run("random_bytes");
  {
    std::string junk(ckpt.size(), '\0');
    std::mt19937 rng(3);
    for (auto& ch : junk) ch = static_cast<char>(rng() & 0xff);
    write_file(random_bytes + "/best.pt", junk);
  }
  // A checkpoint trained with a different hidden size, in a run whose config says 16.
  std::string other_cfg = w + "/other.json";
  {
    Config c = tiny_config_for(w, w + "/other_run", "bahdanau");
    c.model.hidden_dim = 24;
    c.train.max_steps = 1;
    c.train.batch_size = 16;
    write_file(other_cfg, config_to_json(c).dump(2));
    ASSERT_EQ(run_cli("--log-level warn train -c " + other_cfg).code, 0);
  }
  std::string mismatch = copy_run("mismatch");
  fs::copy_file(w + "/other_run/best.pt", mismatch + "/best.pt", fs::copy_options::overwrite_existing);
  fs::copy_file(w + "/other_run/last.pt", mismatch + "/last.pt", fs::copy_options::overwrite_existing);
  std::string no_config = copy_run("no_config");
  fs::remove(no_config + "/config.json");
  std::string no_vocab = copy_run("no_vocab");
  fs::remove(no_vocab + "/tgt.vocab");
  write_file(w + "/bad_pair.align", "0-0 1-x\n");
  write_file(w + "/out_of_range.align", "0-0 99-0\n");
  write_file(w + "/one_line.src", "the cat sleeps\n");
  write_file(w + "/one_line.ref", "le chat dort\n");
  write_file(w + "/nul.src", std::string("the cat\nthe\0dog\n", 16));
  write_file(w + "/long_line.src", "the cat\n" + std::string((1u << 20) + 10, 'a') + "\n");

  std::string other_resume = "train -c " + other_cfg + " --resume --set run_dir=" + w + "/run";
  run_catalogue(w, {
      {"vocabulary with a repeated word", "evaluate -r {W}/bad_vocab", 2, "src.vocab:6"},
      {"vocabulary file missing", "translate -r {W}/no_vocab -i {W}/one_line.src", 2, "tgt.vocab"},
      {"run without config.json", "evaluate -r {W}/no_config", 2, "config.json"},
      {"run directory missing", "evaluate -r {W}/nowhere", 2, "{W}/nowhere"},
      {"truncated checkpoint", "evaluate -r {W}/truncated", 2, "best.pt"},
      {"checkpoint of random bytes", "translate -r {W}/random_bytes -i {W}/one_line.src", 2, "best.pt"},
      {"NUL byte in translate's input", "translate -r {W}/run -i {W}/nul.src", 2, "nul.src:2: contains a NUL byte"},
      {"a line over 1 MiB in translate's input", "translate -r {W}/run -i {W}/long_line.src", 2,
       "long_line.src:2: a line longer than 1 MiB"},
      {"checkpoint from a different model config", "evaluate -r {W}/mismatch", 2, "best.pt"},
      {"resume with a different model config", other_resume, 2, "differs"},
      {"resume a checkpoint of a different shape", "train -c {W}/good.json --resume --set run_dir={W}/mismatch", 2,
       "last.pt"},
      {"malformed Pharaoh pair", "evaluate -r {W}/run --src {W}/one_line.src --ref {W}/one_line.ref --align {W}/bad_pair.align", 2,
       "bad_pair.align:1"},
      {"alignment index out of range",
       "attention -r {W}/run --src {W}/one_line.src --ref {W}/one_line.ref --align {W}/out_of_range.align -o {W}/maps", 2,
       "out_of_range.align:1"},
      {"alignments without --ref", "attention -r {W}/run --src {W}/one_line.src --align {W}/bad_pair.align -o {W}/maps", 2,
       "--ref"},
  });
}

TEST(BadInputCatalogue, RunDirectoriesAndFlags) {
  std::string w = make_work("cat_flags", true);
  write_file(w + "/one_line.src", "the cat sleeps\n");
  write_file(w + "/a_file", "x\n");
  fs::create_symlink("loop", w + "/loop");  // a symlink to itself
  // /proc refuses new files and directories even to root, which a chmod'ed directory does not.
  run_catalogue(w, {
      {"run_dir under a regular file", "train -c {W}/good.json --set run_dir={W}/a_file/run", 2, "a_file"},
      {"run_dir that is a symlink loop", "train -c {W}/good.json --set run_dir={W}/loop", 2, "{W}/loop: Too many levels of symbolic links"},
      {"run_dir on a read-only file system", "train -c {W}/good.json --set run_dir=/proc/attnmt_ro_run", 2,
       "/proc/attnmt_ro_run"},
      {"run_dir already holds a run", "train -c {W}/good.json", 2, "--overwrite"},
      {"resume where nothing was trained", "train -c {W}/good.json --resume --set run_dir={W}/fresh", 2, "nothing to resume"},
      {"translate output on a read-only file system", "translate -r {W}/run -i {W}/one_line.src -o /proc/attnmt_out.txt", 2,
       "/proc/attnmt_out.txt"},
      {"translate input missing", "translate -r {W}/run -i {W}/missing.txt -o {W}/out.txt", 2, "missing.txt"},
      {"translate output is a directory", "translate -r {W}/run -i {W}/one_line.src -o {W}", 2, "is a directory"},
      {"unknown flag", "train -c {W}/good.json --learning-rate 3", 2, "--learning-rate"},
      {"unknown subcommand", "fly -c {W}/good.json", 2, "fly"},
      {"conflicting flags", "train -c {W}/good.json --resume --overwrite", 2, "--overwrite"},
      {"beam 0", "translate -r {W}/run --beam 0 -i {W}/one_line.src", 2, "--beam"},
      {"negative length penalty", "translate -r {W}/run --length-penalty -1 -i {W}/one_line.src", 2, "--length-penalty"},
      {"n-best above the beam", "translate -r {W}/run --beam 2 --nbest 3 -i {W}/one_line.src", 2, "--nbest 3"},
      {"unknown alignment kind", "translate -r {W}/run --alignment fuzzy -i {W}/one_line.src", 2, "--alignment"},
      {"alignment threshold with soft alignments", "translate -r {W}/run --alignment soft --alignment-threshold 0.3 -i {W}/one_line.src",
       2, "--alignment-threshold"},
      {"unknown output format", "translate -r {W}/run --format xml -i {W}/one_line.src", 2, "--format"},
      {"average: more checkpoints than kept", "average -r {W}/run --last 4 -o {W}/avg.pt", 2, "--last 4"},
      {"average: nothing to average", "average -r {W}/run -o {W}/avg.pt", 2, "--last"},
      {"average: a missing checkpoint", "average -r {W}/run --checkpoints {W}/missing.pt -o {W}/avg.pt", 2, "missing.pt"},
      {"negative limit", "attention -r {W}/run --src {W}/one_line.src -o {W}/maps --limit -3", 2, "--limit"},
      {"unknown map format", "attention -r {W}/run --src {W}/one_line.src -o {W}/maps --format png", 2, "png"},
      {"--src without --ref", "evaluate -r {W}/run --src {W}/one_line.src", 2, "--ref"},
      {"unknown checkpoint name", "evaluate -r {W}/run --checkpoint middle", 2, "--checkpoint"},
      {"unknown device", "--device tpu evaluate -r {W}/run", 2, "tpu"},
      {"negative thread count", "--threads -2 evaluate -r {W}/run", 2, "--threads"},
      {"thread count beyond any machine", "--threads 100000 evaluate -r {W}/run", 2, "--threads"},
      {"intra-op thread count beyond any machine", "--intra-threads 100000 evaluate -r {W}/run", 2, "--intra-threads"},
      {"corpus: min length above max length", "corpus -o {W}/toy --min-len 30 --max-len 10", 2, "--min-len"},
      {"bench: zero steps", "bench --steps 0", 2, "--steps"},
      {"train: zero processes", "train -c {W}/good.json --nproc 0", 2, "--nproc"},
      {"train: zero distributed timeout", "train -c {W}/good.json --nproc 2 --dist-timeout 0", 2, "--dist-timeout"},
      {"bleu: unknown metric", "bleu --hyp {W}/one_line.src --ref {W}/one_line.src --metrics rouge", 2, "rouge"},
      {"compare: run directory missing", "compare {W}/run {W}/nowhere -o {W}/cmp", 2, "{W}/nowhere"},
  });
}

// --kernels (or ATTNMT_KERNELS) switches attnmt's CPU kernels for their references: a value it does not know is bad
// input (one line naming where it came from, exit 2); a known one is taken and logged; the flag wins over the variable.
TEST(BadInputCatalogue, KernelSwitch) {
  std::string w = make_work("cat_kernels", false);
  CliResult bad = run_cli("config -c " + w + "/good.json", "", "ATTNMT_KERNELS=fast");
  EXPECT_EQ(bad.code, 2) << bad.output;
  auto errors = error_lines(bad.output);
  ASSERT_EQ(errors.size(), 1u) << bad.output;
  EXPECT_NE(errors[0].find("ATTNMT_KERNELS must be auto or reference, got 'fast'"), std::string::npos) << errors[0];
  CliResult bad_flag = run_cli("--kernels packed config -c " + w + "/good.json");
  EXPECT_EQ(bad_flag.code, 2) << bad_flag.output;
  errors = error_lines(bad_flag.output);
  ASSERT_EQ(errors.size(), 1u) << bad_flag.output;
  EXPECT_NE(errors[0].find("--kernels must be auto or reference, got 'packed'"), std::string::npos) << errors[0];
  CliResult ref = run_cli("config -c " + w + "/good.json", "", "ATTNMT_KERNELS=reference");
  EXPECT_EQ(ref.code, 0) << ref.output;
  EXPECT_NE(ref.output.find("kernels: reference (plain LibTorch operations"), std::string::npos) << ref.output;
  CliResult flag = run_cli("config -c " + w + "/good.json --kernels auto", "", "ATTNMT_KERNELS=reference");
  EXPECT_EQ(flag.code, 0) << flag.output;
  EXPECT_NE(flag.output.find("kernels: auto (CPU kernels in"), std::string::npos) << flag.output;
}

// --precision (and train.precision) takes fp32, tf32 or bf16: anything else is one line and exit 2, before anything is
// written; the flag given to train wins over the config and is logged; a bf16 run's checkpoint translates in fp32.
TEST(BadInputCatalogue, PrecisionSwitch) {
  std::string w = make_work("cat_precision", false);
  CliResult bad_flag = run_cli("--precision fp16 train -c " + w + "/good.json");
  EXPECT_EQ(bad_flag.code, 2) << bad_flag.output;
  auto errors = error_lines(bad_flag.output);
  ASSERT_EQ(errors.size(), 1u) << bad_flag.output;
  EXPECT_NE(errors[0].find("--precision must be fp32, tf32 or bf16, got 'fp16'"), std::string::npos) << errors[0];
  EXPECT_FALSE(std::filesystem::exists(w + "/run"));
  CliResult bad_key = run_cli("train -c " + w + "/good.json --set train.precision=half");
  EXPECT_EQ(bad_key.code, 2) << bad_key.output;
  errors = error_lines(bad_key.output);
  ASSERT_EQ(errors.size(), 1u) << bad_key.output;
  EXPECT_NE(errors[0].find("train.precision"), std::string::npos) << errors[0];
  EXPECT_FALSE(std::filesystem::exists(w + "/run"));
  CliResult bf16 = run_cli("--precision bf16 train -c " + w + "/good.json");
  ASSERT_EQ(bf16.code, 0) << bf16.output;
  EXPECT_NE(read_file(w + "/run/train.log").find("precision: bf16"), std::string::npos);
  CliResult fp32 = run_cli("translate --run " + w + "/run -i " + w + "/test.en -o " + w + "/out.txt");
  EXPECT_EQ(fp32.code, 0) << fp32.output;
  CliResult tf32 = run_cli("--precision tf32 bench -c " + w + "/good.json --attention bahdanau --steps 1 --batch 4 --vocab 20 --json");
  ASSERT_EQ(tf32.code, 0) << tf32.output;
  EXPECT_NE(tf32.output.find("\"precision\": \"tf32\""), std::string::npos) << tf32.output;
}

// Asking for a GPU where there is none is one line that says which of the two is missing (this build's LibTorch
// has no CUDA, or it has and no device is visible), exit 2, nothing written; "auto" says what it chose and why.
TEST(BadInputCatalogue, DeviceWithoutAGpu) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "this machine has a CUDA device (scripts/gpu_check.sh checks it)";
  std::string w = make_work("cat_device", false);
  for (const std::string dev : {"cuda", "cuda:1"}) {
    CliResult r = run_cli("--device " + dev + " train -c " + w + "/good.json");
    EXPECT_EQ(r.code, 2) << r.output;
    auto errors = error_lines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_NE(errors[0].find("device '" + dev + "': " + cuda_unavailable_reason()), std::string::npos) << errors[0];
    EXPECT_FALSE(std::filesystem::exists(w + "/run")) << "a refused run wrote its directory";
  }
  CliResult a = run_cli("--device auto train -c " + w + "/good.json --set run_dir=" + w + "/auto_run");
  EXPECT_EQ(a.code, 0) << a.output;
  EXPECT_NE(a.output.find("device auto: cpu (" + cuda_unavailable_reason() + ")"), std::string::npos) << a.output;
}

}  // namespace
}  // namespace attnmt::test
