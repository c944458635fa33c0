"""The runtime: compiled graphs called on a backend (the emulator or XRT), and CarriedLoop."""
