// attnmt config [--config FILE] [--set key=value]... [--keys]: the resolved config as train would use it,
// or the table of every key.
#include <cstdio>

#include "commands.h"
#include "common/config.h"

namespace attnmt::cli {

Command setup_config(CLI::App& parent, const GlobalOptions&) {
  struct Options {
    std::string config;                  // JSON config file (none: the defaults)
    std::vector<std::string> overrides;  // --set key.path=value
    bool keys = false;                   // print the key table instead
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("config", "Print the resolved config (defaults filled in, validated), or every key");
  app->add_option("--config,-c", opt->config, "JSON config file (none: the defaults)");
  app->add_option("--set", opt->overrides, "Override a config key: key.path=value (repeatable)");
  app->add_flag("--keys", opt->keys, "Print the table of every key (type, default, meaning) as markdown");
  return {app, [opt]() -> int {
            if (opt->keys) {
              std::fputs(config_keys_markdown().c_str(), stdout);
              return 0;
            }
            Config cfg = load_config(opt->config, opt->overrides);
            std::printf("%s\n", config_to_json(cfg).dump(2).c_str());
            return 0;
          }};
}

}  // namespace attnmt::cli
