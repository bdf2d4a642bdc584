// tests/tools/make_dataset.cpp — writes synthetic (learnable) or deliberately broken dataset files
// in the dtrain schema (docs/data.md) for the CLI tests. The writing logic is shared with the unit
// tests (tests/common/dataset_files.hpp).
//
//   make_dataset OUT.h5 --n N --c C --h H --w W --classes K [--dtype uint8|float32] [--seed S]
//                [--template-seed T] [--no-mean-std] [--no-num-classes] [--corrupt KIND]
// --template-seed T draws the class templates from T instead of S: a train and a test set made with
// the same T and different S share their classes but not their samples.
// Exit codes: 0 written, 2 bad usage, 3 write failure.
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "common/dataset_files.hpp"

namespace {

void usage(std::FILE* to) {
  std::string kinds;
  for (const auto& k : dtrain::testing::corrupt_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  std::fprintf(
      to,
      "usage: make_dataset OUT.h5 --n N --c C --h H --w W --classes K\n"
      "                    [--dtype uint8|float32] [--seed S] [--template-seed T] [--no-mean-std]\n"
      "                    [--no-num-classes]\n"
      "                    [--corrupt KIND]\n"
      "Writes a learnable synthetic dataset (class template + noise) in the dtrain schema.\n"
      "Class templates come from T when given (else from S): sets with equal T share classes.\n"
      "--no-num-classes leaves out the `num_classes` and `class_names` attributes.\n"
      "KIND makes a broken file instead: %s.\n",
      kinds.c_str());
}

long long to_int(const std::string& opt, const std::string& v) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size())
    throw std::invalid_argument(opt + " needs an integer, got '" + v + "'");
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  dtrain::testing::SyntheticSpec spec;
  std::string out;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        usage(stdout);
        return 0;
      }
      if (a == "--no-mean-std") {
        spec.mean_std = false;
        continue;
      }
      if (a == "--no-num-classes") {
        spec.num_classes_attr = false;
        continue;
      }
      if (a.rfind("--", 0) == 0) {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        const std::string v = argv[++i];
        if (a == "--n") spec.n = to_int(a, v);
        else if (a == "--c") spec.c = static_cast<int>(to_int(a, v));
        else if (a == "--h") spec.h = static_cast<int>(to_int(a, v));
        else if (a == "--w") spec.w = static_cast<int>(to_int(a, v));
        else if (a == "--classes") spec.classes = static_cast<int>(to_int(a, v));
        else if (a == "--seed") spec.seed = static_cast<std::uint64_t>(to_int(a, v));
        else if (a == "--template-seed")
          spec.template_seed = static_cast<std::uint64_t>(to_int(a, v));
        else if (a == "--dtype") spec.dtype = v;
        else if (a == "--corrupt") spec.corrupt = v;
        else throw std::invalid_argument("unknown option " + a);
      } else if (out.empty()) {
        out = a;
      } else {
        throw std::invalid_argument("more than one output file given");
      }
    }
    if (out.empty()) throw std::invalid_argument("no output file given");
    dtrain::testing::make_synthetic(spec);  // validates sizes and dtype before touching the file
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_dataset: error: %s\n", e.what());
    usage(stderr);
    return 2;
  }
  try {
    dtrain::testing::write_synthetic_dataset(out, spec);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "make_dataset: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_dataset: error: %s\n", e.what());
    return 3;
  }
  std::printf("make_dataset: wrote %s (%lld samples %dx%dx%d, %d classes, %s%s%s)\n", out.c_str(),
              static_cast<long long>(spec.n), spec.c, spec.h, spec.w, spec.classes,
              spec.dtype.c_str(), spec.corrupt.empty() ? "" : ", corrupt: ", spec.corrupt.c_str());
  return 0;
}
