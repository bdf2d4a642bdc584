// src/core/config_table.hpp — private to src/core: the options table that config_options.cpp fills
// (every option, its default and help) and config.cpp parses the command line and job file with
// (Boost.Program_options), and to_text(), which both and config_checks.cpp print values with.
#pragma once

#include <boost/program_options.hpp>
#include <charconv>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dtrain/core/config.hpp"

namespace dtrain::config_detail {

namespace po = boost::program_options;

/// v as a job file writes it: true/false for bools, floating point as the shortest text that
/// reads back as the same value (0.05, not float's 0.0500000007).
template <typename T>
std::string to_text(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    os << std::string_view(buf, static_cast<std::size_t>(r.ptr - buf));
  } else {
    os << v;
  }
  return os.str();
}

/// The options table: each entry registers the option with Boost and remembers how to print its
/// current value (for the effective configuration).
class Table {
 public:
  struct Entry {
    std::string section, name;
    std::function<std::string()> value;
  };

  po::options_description& group(const std::string& title, const std::string& section) {
    groups_.emplace_back(std::make_unique<po::options_description>(title));
    section_ = section;
    return *groups_.back();
  }

  template <typename T>
  void add(const char* name, T* field, const char* help) {
    auto* v = po::value<T>(field)->default_value(*field, to_text(*field));
    if constexpr (std::is_same_v<T, bool>) v->implicit_value(true, "true");
    groups_.back()->add_options()(name, v, help);
    entries_.push_back({section_, name, [field] { return to_text(*field); }});
  }

  void add_list(const char* name, std::vector<std::string>* field, const char* help) {
    groups_.back()->add_options()(name, po::value<std::vector<std::string>>(field), help);
    entries_.push_back({section_, name, [field] {
                          std::string s;
                          for (std::size_t i = 0; i < field->size(); ++i)
                            s += (i ? "\nlayer = " : "") + (*field)[i];
                          return s;
                        }});
  }

  po::options_description all() const {
    po::options_description d("dtrain options (job file keys use the same names; the command "
                              "line overrides the job file)");
    for (const auto& g : groups_) d.add(*g);
    return d;
  }

  std::string effective_ini() const {
    std::ostringstream os;
    std::string section;
    for (const auto& e : entries_) {
      if (e.section != section) {
        section = e.section;
        os << "\n[" << section << "]\n";
      }
      os << e.name << " = " << e.value() << "\n";
    }
    return os.str();
  }

 private:
  std::vector<std::unique_ptr<po::options_description>> groups_;
  std::vector<Entry> entries_;
  std::string section_;
};

/// Registers every option of Config with t, in --help order (config_options.cpp); each option
/// writes into its field of c.
void build_table(Table& t, Config& c);

}  // namespace dtrain::config_detail
