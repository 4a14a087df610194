// attnmt attention
#include "commands.h"
#include "common/errors.h"

namespace attnmt::cli {

Command setup_attention(CLI::App& parent, const GlobalOptions& g) {
  auto* app = parent.add_subcommand("attention", "attention (not available yet)");
  return {app, []() -> int { throw Error("'attention' is not implemented yet"); }};
}

}  // namespace attnmt::cli
