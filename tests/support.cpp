// The test binary's global environment: what every test shares once the last one has run.
#include <gtest/gtest.h>

#include "support.h"

namespace attnmt::test {
namespace {

class RemoveTempPaths : public testing::Environment {
 public:
  void TearDown() override { temp_paths().remove_all(); }
};

// GoogleTest owns and deletes the environment.
testing::Environment* const kRemoveTempPaths = testing::AddGlobalTestEnvironment(new RemoveTempPaths);

}  // namespace
}  // namespace attnmt::test
