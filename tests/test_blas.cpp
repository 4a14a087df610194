// The matrix kernel attnmt runs: the products are right under it, attnmt picks the fast one when OpenBLAS
// falls back to its generic kernel, and a value the environment sets is always kept.
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/runtime.h"
#include "support.h"

namespace attnmt {
namespace {

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The reason to skip the tests of attnmt's own choice, or "" when it would choose a kernel here.
std::string why_no_choice() {
  if (const char* v = std::getenv("OPENBLAS_CORETYPE"))
    return std::string("the environment sets OPENBLAS_CORETYPE=") + v + "; attnmt keeps it and chooses nothing";
  if (blas_kernel().empty()) return "the BLAS is not OpenBLAS";
  if (preferred_blas_kernel().empty()) return "this CPU has neither AVX2 nor AVX-512: the generic kernel is the right one";
  return "";
}

nlohmann::json bench_json(const std::string& env) {
  const std::string dir = test::temp_dir("blas_bench");
  Config c = test::tiny_config_for(test::tiny_toy_corpus("blas_bench_corpus", 8, 2, 2, 10), dir + "/run", "none");
  test::write_file(dir + "/model.json", config_to_json(c).dump(2));
  auto r = test::run_cli("--log-level warn bench -c " + dir + "/model.json --attention none --steps 1 --batch 4 --vocab 20 --json",
                         "", env);
  EXPECT_EQ(r.code, 0) << r.output;
  const size_t start = r.output.find('{');
  if (start == std::string::npos) return nlohmann::json::object();
  return nlohmann::json::parse(r.output.substr(start));
}

}  // namespace

TEST(Blas, ProductsOfThisProcessMatchTheDoubleReference) {
  std::printf("BLAS kernel in this process: %s\n", blas_kernel().c_str());
  const BlasCheck r = check_blas_products(/*thorough=*/true);
  EXPECT_TRUE(r.ok) << r.failure;
  EXPECT_GE(r.products, 2 * 13 * 9);  // float and double, 13 shapes, 4 mm + 2 mv + 3 bmm each
}

TEST(Blas, CheckFindsAWrongProduct) {
  // The checker itself: a product with one wrong element fails, the right one passes.
  BlasCheck ok = check_blas_products(false);
  ASSERT_TRUE(ok.ok) << ok.failure;
  EXPECT_GT(ok.products, 0);
  for (torch::ScalarType type : {torch::kFloat, torch::kDouble}) {
    torch::manual_seed(3);
    const torch::Tensor a = torch::rand({37, 300}, type) - 0.5, b = torch::rand({300, 41}, type) - 0.5;
    torch::Tensor c = torch::mm(a, b);
    std::string why;
    EXPECT_TRUE(product_matches_reference(a, b, c, &why)) << why;
    c[5][17] += 1.0;  // one element wrong by about its own size, as a kernel bug makes it
    EXPECT_FALSE(product_matches_reference(a, b, c, &why));
    EXPECT_NE(why.find("row 5"), std::string::npos) << why;
    EXPECT_FALSE(product_matches_reference(a, b, c.narrow(1, 0, 40))) << "wrong shape accepted";
  }
}

TEST(Blas, TheKernelAttnmtWouldChooseComputesCorrectly) {
  if (auto why = why_no_choice(); !why.empty()) GTEST_SKIP() << why;
  const std::string kernel = preferred_blas_kernel();
  // A fresh copy of this binary, loaded with that kernel, runs the thorough check.
  const std::string out = test::temp_dir("blas_child") + "/out.txt";
  const std::string cmd = "OPENBLAS_CORETYPE=" + kernel + " " + self_path() +
                          " --gtest_filter=Blas.ProductsOfThisProcessMatchTheDoubleReference >" + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string log = test::read_file(out);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("BLAS kernel in this process: " + kernel), std::string::npos) << log;
  EXPECT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
}

TEST(Blas, AttnmtRunsAFastKernelByDefault) {
  if (auto why = why_no_choice(); !why.empty()) GTEST_SKIP() << why;
  // Whatever OpenBLAS makes of this CPU by itself, attnmt never runs its generic kernel here.
  nlohmann::json j = bench_json("");
  ASSERT_TRUE(j.contains("blas_kernel")) << j.dump();
  EXPECT_FALSE(is_generic_blas_kernel(j["blas_kernel"].get<std::string>())) << j.dump();
  // Where OpenBLAS falls back to its generic kernel (forced here: this CPU's may be recognised), attnmt picks
  // the fast family itself, checks it, and says so.
  j = bench_json("ATTNMT_TEST_BLAS_GENERIC=1");
  ASSERT_TRUE(j.contains("blas_kernel")) << j.dump();
  EXPECT_EQ(j["blas_kernel"].get<std::string>(), preferred_blas_kernel()) << j.dump();
  EXPECT_NE(j["blas_kernel_choice"].get<std::string>().find("chosen by attnmt"), std::string::npos) << j.dump();
  EXPECT_NE(j["blas_kernel_choice"].get<std::string>().find("products checked"), std::string::npos) << j.dump();
}

TEST(Blas, AKernelThatFailsTheCheckIsNotUsed) {
  if (auto why = why_no_choice(); !why.empty()) GTEST_SKIP() << why;
  if (preferred_blas_kernel() != "SkylakeX") GTEST_SKIP() << "the fallback from SkylakeX to Haswell needs an AVX-512 CPU";
  nlohmann::json j = bench_json("ATTNMT_TEST_BLAS_GENERIC=1 ATTNMT_TEST_BLAS_REJECT=SkylakeX");
  ASSERT_TRUE(j.contains("blas_kernel")) << j.dump();
  EXPECT_EQ(j["blas_kernel"].get<std::string>(), "Haswell") << j.dump();
  EXPECT_NE(j["blas_kernel_choice"].get<std::string>().find("chosen by attnmt"), std::string::npos) << j.dump();
  j = bench_json("ATTNMT_TEST_BLAS_GENERIC=1 ATTNMT_TEST_BLAS_REJECT=SkylakeX,Haswell");
  ASSERT_TRUE(j.contains("blas_kernel")) << j.dump();
  EXPECT_TRUE(is_generic_blas_kernel(j["blas_kernel"].get<std::string>())) << j.dump();
  EXPECT_NE(j["blas_kernel_choice"].get<std::string>().find("checks of the faster kernels failed"), std::string::npos) << j.dump();
}

TEST(Blas, AKernelTheEnvironmentSetsIsKept) {
  if (blas_kernel().empty()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  nlohmann::json j = bench_json("OPENBLAS_CORETYPE=Prescott");
  ASSERT_TRUE(j.contains("blas_kernel")) << j.dump();
  EXPECT_EQ(j["blas_kernel"].get<std::string>(), "Prescott") << j.dump();
  EXPECT_NE(j["blas_kernel_choice"].get<std::string>().find("OPENBLAS_CORETYPE=Prescott set in the environment"), std::string::npos)
      << j.dump();
}

}  // namespace attnmt
