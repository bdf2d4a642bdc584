#!/usr/bin/env python3
"""tests/cli/corrupt_chunk.py FILE DATASET — flips 8 bytes in the middle of DATASET's first chunk
of the HDF5 file FILE, in place (the tests' stand-in for a bit rot or a torn write).

The dataset must carry HDF5's Fletcher32 checksum filter (dtrain's checkpoints do), which must then
catch the change: the file stays a valid HDF5 file whose metadata reads, only that chunk's data no
longer matches its checksum. Exits 1 naming the dataset when it has no checksum or no data.
"""
import sys

import h5py


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().split("\n")[0], file=sys.stderr)
        return 2
    path, name = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as f:
        d = f[name]
        if not d.fletcher32 or d.size == 0:
            print(f"corrupt_chunk.py: {path}:{name}: no Fletcher32 checksum or no data",
                  file=sys.stderr)
            return 1
        info = d.id.get_chunk_info(0)
        at = info.byte_offset + info.size // 2
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(8)
        f.seek(at)
        f.write(bytes(x ^ 0xFF for x in b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
