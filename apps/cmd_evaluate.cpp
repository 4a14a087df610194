// attnmt evaluate
#include "commands.h"
#include "common/errors.h"

namespace attnmt::cli {

Command setup_evaluate(CLI::App& parent, const GlobalOptions& g) {
  auto* app = parent.add_subcommand("evaluate", "evaluate (not available yet)");
  return {app, []() -> int { throw Error("'evaluate' is not implemented yet"); }};
}

}  // namespace attnmt::cli
