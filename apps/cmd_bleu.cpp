// attnmt bleu
#include "commands.h"
#include "common/errors.h"

namespace attnmt::cli {

Command setup_bleu(CLI::App& parent, const GlobalOptions& g) {
  auto* app = parent.add_subcommand("bleu", "bleu (not available yet)");
  return {app, []() -> int { throw Error("'bleu' is not implemented yet"); }};
}

}  // namespace attnmt::cli
