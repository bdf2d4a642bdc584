// dtrain/core/files.cpp — atomic replacement of output files (core/files.hpp).
#include "dtrain/core/files.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "dtrain/core/error.hpp"

namespace dtrain {

void replace_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec)
    throw LibraryError(format_error(
        "cannot rename '" + from + "' to '" + to + "': " + ec.message(), __FILE__, __LINE__));
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw LibraryError(format_error("cannot write '" + tmp + "'", __FILE__, __LINE__));
  }
  replace_file(tmp, path);
}

}  // namespace dtrain
