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

/// A floating-point option's value: std::from_chars' reading of the whole text (a leading '+'
/// allowed), so that a number beyond the type's range is an error naming the option and the value
/// — Boost's lexical_cast refuses 1e400 but reads 1e-400 as 0, which for --checkpoint-secs means
/// off and for a float --lr means no training.
template <typename T>
class RealValue : public po::typed_value<T> {
 public:
  explicit RealValue(T* field) : po::typed_value<T>(field) {}

  void xparse(boost::any& out, const std::vector<std::string>& tokens) const override {
    po::validators::check_first_occurrence(out);
    const std::string& text = po::validators::get_single_string(tokens);
    const char* first = text.data() + (text.starts_with('+') ? 1 : 0);
    const char* last = text.data() + text.size();
    T v{};
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec == std::errc() && end == last && first != last) {
      out = v;
      return;
    }
    const char* type = std::is_same_v<T, float> ? "a float" : "a double";
    po::error_with_option_name e(
        ec == std::errc::result_out_of_range && end == last
            ? std::string("option '%canonical_option%': value '%value%' is out of the range of ") +
                  type + " (its magnitude is too large, or too small to tell from 0)"
            : "option '%canonical_option%': invalid value '%value%' (expected a number)");
    e.set_substitute("value", text);
    throw e;
  }
};

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
    po::typed_value<T>* v = nullptr;
    if constexpr (std::is_floating_point_v<T>)
      v = new RealValue<T>(field);  // owned by the option description, as po::value's result
    else v = po::value<T>(field);
    v->default_value(*field, to_text(*field));
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
