"""The runtime: compiled graphs called on a backend (the emulator or XRT), and CarriedLoop.

It runs Plans the compiler made; it does not trace or lower anything itself."""
