// dtrain/core/version.hpp — the build's version: `git describe --tags --always --dirty` of the
// source tree when it was built (cmake/GitVersion.cmake, run at every build, so a rebuild after a
// new commit updates it), or the CMake project version when built outside a git checkout.
#pragma once

namespace dtrain {

/// E.g. "5b496a1", "v0.2-3-g5b496a1-dirty" or "0.1.0". Never null; thread-safe (a constant).
const char* dtrain_version();

}  // namespace dtrain
