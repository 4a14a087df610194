// File-system helpers: atomic writes (temporary file + rename) so that a crash or a kill never leaves
// a half-written file under the final name.
#pragma once
#include <functional>
#include <string>

namespace attnmt {

// Writes text to path through path.tmp.<pid> and rename(). Throws Error on I/O failure.
void write_file_atomic(const std::string& path, const std::string& text);

// Calls write(tmp_path) to produce the file, fsyncs it, then renames it over path. On failure the
// temporary file is removed and the previous file at path stays as it was.
void write_atomic_with(const std::string& path, const std::function<void(const std::string& tmp_path)>& write);

// Creates a directory (and parents); throws UsageError naming it when that fails.
void make_dirs(const std::string& dir);

}  // namespace attnmt
