// tests/tools/image_tool.cpp — io/image.hpp from the command line, for
// tests/cli/test_encoded_images.sh (which compares the pixels with Pillow's). Reads commands from
// stdin, one per line:
//   crop PATH C X Y W H S FLIP   decode PATH to C channels, crop the box, resize to S×S (bilinear,
//                                as Pillow img.crop(box).resize), mirror when FLIP is 1: a JPEG
//                                decodes only the box's region (transform_image)
//   center PATH C R S            Resize(R) + CenterCrop(S) as torchvision on a PIL image
//   rrc PATH C S KEY FLIP        RandomResizedCrop(S) with draws from KEY, DCT scaling allowed
//   box W H KEY                  print random_resized_crop_box(W, H, KEY) as "x y w h"
// crop/center/rrc append C×S×S uint8 (planar) to the output file named by argv[1] and print
// "ok x y w h" (the box used) or "bad <reason>" for a bad image.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/io/image.hpp"

using namespace dtrain;

namespace {
std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: image_tool OUT.bin < commands\n");
    return 2;
  }
  std::ofstream out(argv[1], std::ios::binary);
  ImageDecoder dec;
  Image8 img;
  std::vector<std::uint8_t> planar;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream is(line);
    std::string cmd, path;
    is >> cmd;
    if (cmd == "box") {
      int w = 0, h = 0;
      unsigned long long key = 0;
      is >> w >> h >> key;
      const CropBox b = random_resized_crop_box(w, h, key);
      std::printf("%d %d %d %d\n", b.x, b.y, b.w, b.h);
      continue;
    }
    int c = 0, s = 0;
    ImageTransform t;
    CropBox box;
    unsigned long long key = 0;
    int flip = 0;
    is >> path;
    if (cmd == "crop") {  // through transform_image's region decode, without DCT scaling
      is >> c >> t.box.x >> t.box.y >> t.box.w >> t.box.h >> s >> flip;
      t.random_crop = true;
      t.dct_ratio = 0;
    } else if (cmd == "center") {
      is >> c >> t.resize >> s;
      t.dct_ratio = 0;
    } else if (cmd == "rrc") {
      is >> c >> s >> key >> flip;
      t.random_crop = true;
    } else {
      std::fprintf(stderr, "image_tool: unknown command '%s'\n", cmd.c_str());
      return 2;
    }
    t.out = s;
    t.flip = flip != 0;
    planar.assign(static_cast<std::size_t>(c) * s * s, 0);
    try {
      const std::vector<std::uint8_t> bytes = read_file(path);
      box = transform_image(dec, bytes.data(), bytes.size(), c, t, key, img, planar.data());
      std::printf("ok %d %d %d %d\n", box.x, box.y, box.w, box.h);
    } catch (const ImageError& e) {
      std::printf("bad %s\n", e.what());
    }
    out.write(reinterpret_cast<const char*>(planar.data()),
              static_cast<std::streamsize>(planar.size()));
  }
  return 0;
}
