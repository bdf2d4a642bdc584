// dtrain/core/files.cpp — atomic replacement of output files (core/files.hpp).
#include "dtrain/core/files.hpp"

#include <cerrno>
#include <cstring>
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

std::string errno_reason() {
  return errno != 0 ? std::string(": ") + std::strerror(errno) : std::string();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
      throw LibraryError(format_error("cannot write '" + tmp + "'" + errno_reason(), __FILE__,
                                      __LINE__));
  }
  replace_file(tmp, path);
}

}  // namespace dtrain
