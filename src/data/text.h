// Text utilities: UTF-8 validation, line reading, tokenizers (space, sacreBLEU 13a) and detokenizer.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace attnmt {

// Returns the byte offset of the first invalid UTF-8 sequence, or std::string::npos when valid.
size_t find_invalid_utf8(std::string_view s);

// The UTF-8 byte-order mark some editors write at the start of a file.
inline constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
// Removes a byte-order mark at the start of s (the first line of a file); true when there was one.
bool strip_bom(std::string& s);

// Reads all lines of a file, stripping a byte-order mark at its start, a trailing '\r' (CRLF files), and checking UTF-8.
// Throws UsageError naming the file (and line) when it is missing, unreadable or not UTF-8.
std::vector<std::string> read_lines(const std::string& path);

// Number of lines in a file (a final line without '\n' counts), without checking their text; throws
// UsageError when unreadable.
size_t count_lines(const std::string& path);

enum class TokenizerKind { kSpace, k13a };
TokenizerKind tokenizer_from_string(const std::string& name);  // throws UsageError

// Lowercases ASCII and the common Latin-1/Latin Extended-A letters (enough for en/de/fr).
std::string to_lower_utf8(std::string_view s);

// sacreBLEU's 13a tokenization, returned as a single space-separated string.
std::string tokenize_13a_string(std::string_view line);

// Splits on whitespace (the same set Python's str.split() uses for the characters that occur here).
std::vector<std::string> split_whitespace(std::string_view s);

// Tokenizes a line with the given tokenizer (after optional lowercasing).
std::vector<std::string> tokenize(std::string_view line, TokenizerKind kind, bool lowercase);

// Joins tokens back into plain text. For 13a, punctuation is attached where 13a would split it
// again, so tokenize_13a(detokenize(t)) == t for the text this tool produces.
std::string detokenize(const std::vector<std::string>& tokens, TokenizerKind kind);

}  // namespace attnmt
