// attnmt translate
#include "commands.h"
#include "common/errors.h"

namespace attnmt::cli {

Command setup_translate(CLI::App& parent, const GlobalOptions& g) {
  auto* app = parent.add_subcommand("translate", "translate (not available yet)");
  return {app, []() -> int { throw Error("'translate' is not implemented yet"); }};
}

}  // namespace attnmt::cli
