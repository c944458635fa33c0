"""The runtime: compiled graphs called on a backend (the emulator or XRT), one call at a time or as
a CarriedLoop, from the Plans the compiler made.
"""
