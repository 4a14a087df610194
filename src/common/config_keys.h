// The config key table (internal to src/common/: config.cpp reads and writes Config through it).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"

namespace attnmt::config_detail {

// One config key: where it lives in the JSON tree and in Config, how it is read, written and checked.
struct Key {
  std::string path;   // JSON path, e.g. "train.lr"
  std::string type;   // as configs/README.md shows it: integer, number, boolean, string, choice, list of integers
  std::string doc;    // one line: what it does
  std::function<const void*(const Config&)> address;        // the field, for config_key()
  std::function<nlohmann::json(const Config&)> get;         // the value as written to config.json
  std::function<void(Config&, const nlohmann::json&)> set;  // type-checked read (fails naming the path)
  std::function<void(const Config&)> check;                 // range or choice check (validate)
  // Whether the key means anything for this config: "" when it does, else why not ("only applies to type 'luong', not
  // 'bahdanau'"). validate refuses a key set away from its default where it does not apply. Empty: always applies.
  std::function<std::string(const Config&)> applies;
  std::string when;  // the same for people (configs/README.md's "applies" column): "type `luong`"; empty: always
  bool write_default = true;                                // false: left out of config.json while at its default
};

// Every config key, in the order of configs/README.md. The one place a key's name is spelled.
const std::vector<Key>& keys();

// Reads the JSON object j at section prefix ("" = the root) into c, key by key; unknown keys fail naming the valid
// ones, retired keys are ignored with a warning.
void read_section(Config& c, const nlohmann::json& j, const std::string& prefix);

// Sets root's value at a dotted path, making the objects on the way.
void set_path(nlohmann::json& root, const std::string& path, nlohmann::json value);

// "data.train" of "data.train.src"; "" at the top level.
std::string parent_of(const std::string& path);

// A config error naming the key: UsageError "config: PATH: WHAT".
[[noreturn]] void fail(const std::string& path, const std::string& what);

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ");

}  // namespace attnmt::config_detail
