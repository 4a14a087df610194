// Fuzzes the JSON config reader: parse, typed conversion, validation, and the --set override parser.
#include "common/config.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  std::string text(reinterpret_cast<const char*>(data), size);
  // Everything after the first NUL byte is used as one --set override.
  std::string override_text;
  if (auto nul = text.find('\0'); nul != std::string::npos) {
    override_text = text.substr(nul + 1);
    text.resize(nul);
  }
  std::string path = fuzz::scratch_file("config.json");
  fuzz::write_bytes(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
  try {
    std::vector<std::string> overrides;
    if (!override_text.empty()) overrides.push_back(override_text);
    Config c = load_config(path, overrides);
    validate(c);
    // A valid config survives the round trip through JSON unchanged.
    nlohmann::json j = config_to_json(c);
    fuzz::check(config_to_json(config_from_json(j)) == j, "config JSON round trip");
  } catch (const UsageError&) {
  }
  return 0;
}
