// attnmt compare
#include "commands.h"
#include "common/errors.h"

namespace attnmt::cli {

Command setup_compare(CLI::App& parent, const GlobalOptions& g) {
  auto* app = parent.add_subcommand("compare", "compare (not available yet)");
  return {app, []() -> int { throw Error("'compare' is not implemented yet"); }};
}

}  // namespace attnmt::cli
