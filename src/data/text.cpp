#include "data/text.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "common/errors.h"

namespace attnmt {

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong encodings, surrogates and out-of-range code points are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string::npos;
}

bool strip_bom(std::string& s) {
  if (s.compare(0, kUtf8Bom.size(), kUtf8Bom) != 0) return false;
  s.erase(0, kUtf8Bom.size());
  return true;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open file");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lines.empty()) strip_bom(line);
    size_t bad = find_invalid_utf8(line);
    if (bad != std::string::npos)
      throw UsageError(path + ":" + std::to_string(lines.size() + 1) + ": invalid UTF-8 at byte " + std::to_string(bad + 1));
    if (line.find('\0') != std::string::npos)
      throw UsageError(path + ":" + std::to_string(lines.size() + 1) + ": contains a NUL byte (binary file?)");
    lines.push_back(std::move(line));
    line.clear();
  }
  if (in.bad()) throw UsageError(path + ": read error");
  return lines;
}

size_t count_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open file");
  size_t n = 0;
  char last = '\n';
  char buf[65536];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    const auto got = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < got; ++i) n += buf[i] == '\n';
    last = buf[got - 1];
  }
  if (in.bad()) throw UsageError(path + ": read error");
  return n + (last != '\n');
}

TokenizerKind tokenizer_from_string(const std::string& name) {
  if (name == "space" || name == "none") return TokenizerKind::kSpace;
  if (name == "13a") return TokenizerKind::k13a;
  throw UsageError("unknown tokenizer '" + name + "'. Valid options: space, 13a");
}

std::string to_lower_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else if (c == 0xC3 && i + 1 < s.size()) {
      // U+00C0..U+00DE (except U+00D7 multiplication sign) -> +0x20
      auto d = static_cast<unsigned char>(s[i + 1]);
      out.push_back(static_cast<char>(c));
      out.push_back(static_cast<char>((d >= 0x80 && d <= 0x9E && d != 0x97) ? d + 0x20 : d));
      ++i;
    } else if (c == 0xC5 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) == 0x92 ||
                                                 static_cast<unsigned char>(s[i + 1]) == 0xB8)) {
      // Œ (C5 92) -> œ (C5 93); Ÿ (C5 B8) -> ÿ (C3 BF)
      if (static_cast<unsigned char>(s[i + 1]) == 0x92) {
        out += "\xC5\x93";
      } else {
        out += "\xC3\xBF";
      }
      ++i;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

namespace {

// The code point of the one-, two- or three-byte UTF-8 sequence at s[i] and its length; length 0 where there is none
// (a longer or malformed sequence, an overlong form). Whitespace never needs four bytes.
struct ShortCodePoint {
  uint32_t cp = 0;
  size_t len = 0;
};
ShortCodePoint decode_short(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto continuation = [&](size_t k) { return i + k < s.size() && (byte(k) & 0xC0) == 0x80; };
  const unsigned char c = byte(0);
  if (c < 0x80) return {c, 1};
  if (c >= 0xC2 && c <= 0xDF && continuation(1)) return {(c & 0x1Fu) << 6 | (byte(1) & 0x3Fu), 2};
  if (c < 0xE0 || c > 0xEF || !continuation(1) || !continuation(2)) return {};
  const uint32_t cp = (c & 0x0Fu) << 12 | (byte(1) & 0x3Fu) << 6 | (byte(2) & 0x3Fu);
  return cp < 0x800 ? ShortCodePoint{} : ShortCodePoint{cp, 3};
}

// The characters Python's str.split() treats as whitespace: ASCII whitespace, the separators U+001C..U+001F, U+0085,
// U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
bool is_split_space(uint32_t cp) {
  static constexpr std::pair<uint32_t, uint32_t> kRanges[] = {{0x09, 0x0D}, {0x1C, 0x20},     {0x85, 0x85},
                                                              {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                                              {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                                              {0x3000, 0x3000}};
  return std::any_of(std::begin(kRanges), std::end(kRanges), [&](const auto& r) { return cp >= r.first && cp <= r.second; });
}

// Length of the whitespace character starting at s[i] (0 if none).
size_t whitespace_len(std::string_view s, size_t i) {
  const ShortCodePoint c = decode_short(s, i);
  return c.len > 0 && is_split_space(c.cp) ? c.len : 0;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// 13a rule 1: the ASCII symbols { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
bool is_13a_symbol(char c) {
  auto u = static_cast<unsigned char>(c);
  return (u >= '{' && u <= '~') || (u >= '[' && u <= '`') || (u >= ' ' && u <= '&') || (u >= '(' && u <= '+') ||
         (u >= ':' && u <= '@') || u == '/';
}

// Emulates Python's re.sub for a two-character pattern (a)(b) -> replacement built from a and b:
// leftmost, non-overlapping matches, scanning left to right.
template <class Match, class Emit>
std::string sub_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out.push_back(s[i]);
      ++i;
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0, start = std::string::npos;
  while (i < s.size()) {
    size_t w = whitespace_len(s, i);
    if (w > 0) {
      if (start != std::string::npos) out.emplace_back(s.substr(start, i - start));
      start = std::string::npos;
      i += w;
    } else {
      if (start == std::string::npos) start = i;
      ++i;
    }
  }
  if (start != std::string::npos) out.emplace_back(s.substr(start));
  return out;
}

std::string tokenize_13a_string(std::string_view input) {
  std::string line(input);
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  line = " " + line + " ";
  // Rule 1: space out the ASCII symbols.
  std::string r1;
  r1.reserve(line.size() * 2);
  for (char c : line) {
    if (is_13a_symbol(c)) {
      r1.push_back(' ');
      r1.push_back(c);
      r1.push_back(' ');
    } else {
      r1.push_back(c);
    }
  }
  // Rule 2: period and comma unless preceded by a digit: ([^0-9])([.,]) -> "\1 \2 ".
  std::string r2 = sub_pairs(
      r1, [](char a, char b) { return !is_digit(a) && (b == '.' || b == ','); },
      [](std::string& o, char a, char b) { o.push_back(a); o.push_back(' '); o.push_back(b); o.push_back(' '); });
  // Rule 3: period and comma unless followed by a digit: ([.,])([^0-9]) -> " \1 \2".
  std::string r3 = sub_pairs(
      r2, [](char a, char b) { return (a == '.' || a == ',') && !is_digit(b); },
      [](std::string& o, char a, char b) { o.push_back(' '); o.push_back(a); o.push_back(' '); o.push_back(b); });
  // Rule 4: dash preceded by a digit: ([0-9])(-) -> "\1 \2 ".
  std::string r4 = sub_pairs(
      r3, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& o, char a, char b) { o.push_back(a); o.push_back(' '); o.push_back(b); o.push_back(' '); });
  auto toks = split_whitespace(r4);
  std::string out;
  for (size_t i = 0; i < toks.size(); ++i) {
    if (i) out.push_back(' ');
    out += toks[i];
  }
  return out;
}

std::vector<std::string> tokenize(std::string_view line, TokenizerKind kind, bool lowercase) {
  std::string text = lowercase ? to_lower_utf8(line) : std::string(line);
  if (kind == TokenizerKind::k13a) return split_whitespace(tokenize_13a_string(text));
  return split_whitespace(text);
}

namespace {
bool attaches_left(const std::string& t) {  // no space before these
  return t == "." || t == "," || t == "!" || t == "?" || t == ";" || t == ":" || t == ")" || t == "]" ||
         t == "}" || t == "%";
}
bool attaches_right(const std::string& t) { return t == "(" || t == "[" || t == "{"; }  // no space after these
}  // namespace

std::string detokenize(const std::vector<std::string>& tokens, TokenizerKind kind) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    bool space = i > 0;
    if (kind == TokenizerKind::k13a && i > 0) {
      const std::string& prev = tokens[i - 1];
      const std::string& cur = tokens[i];
      if (attaches_right(prev)) space = false;
      if (attaches_left(cur)) {
        // "3" + "." + "5" would merge into a number that 13a keeps whole: keep the space then.
        bool digit_before = !prev.empty() && is_digit(prev.back());
        bool digit_after = i + 1 < tokens.size() && !tokens[i + 1].empty() && is_digit(tokens[i + 1][0]);
        bool is_sep = cur == "." || cur == ",";
        if (!(is_sep && (digit_before || digit_after))) space = false;
      }
    }
    if (space) out.push_back(' ');
    out += tokens[i];
  }
  return out;
}

}  // namespace attnmt
