"""The mlir-aie toolchain driver: a Plan's printed MLIR and kernel C++ built into an xclbin or
ELF with aiecc and Peano (build.py), once per content (cache.py). It knows no Plan."""
