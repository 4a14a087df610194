// attnmt bench
#include "commands.h"
#include "common/errors.h"

namespace attnmt::cli {

Command setup_bench(CLI::App& parent, const GlobalOptions& g) {
  auto* app = parent.add_subcommand("bench", "bench (not available yet)");
  return {app, []() -> int { throw Error("'bench' is not implemented yet"); }};
}

}  // namespace attnmt::cli
